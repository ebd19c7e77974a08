package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Backend state faults: at moments the plan draws, the memory backend
// loses state, as a store that restarted without persistence (or came
// back from an old snapshot) would. The link's faults lose calls and
// replies; these lose what the backend had already applied.

// lossKind is what the backend loses.
type lossKind uint8

const (
	// lossRestart: a restart without persistence: every lock, every mark
	// and the fence counters are gone (pause flags are kept: the
	// simulation's operators would set them again, and 6b stays strict).
	lossRestart lossKind = iota + 1
	// lossMarks: the marks of some keys (all when keys is nil) are gone.
	lossMarks
	// lossRewind: the marks of some keys (all when keys is nil) are set
	// back by back, as a snapshot that old holds them.
	lossRewind
	// lossFences: the fence counters are set back to zero.
	lossFences
)

func (k lossKind) String() string {
	switch k {
	case lossRestart:
		return "restart (locks, marks, fence counters lost)"
	case lossMarks:
		return "marks forgotten"
	case lossRewind:
		return "marks set back"
	case lossFences:
		return "fence counters set back"
	}
	return fmt.Sprintf("loss(%d)", uint8(k))
}

// stateLoss is one loss of backend state, at a true time.
type stateLoss struct {
	kind lossKind
	at   time.Time
	keys []string      // nil: every key
	back time.Duration // lossRewind: how far back
}

// marks reports whether the loss moved key's mark (forgot it or set it
// back); locks whether it dropped key's lock.
func (w stateLoss) marks(key string) bool {
	return w.kind != lossFences && (w.keys == nil || slices.Contains(w.keys, key))
}

func (w stateLoss) locks() bool { return w.kind == lossRestart }

func (w stateLoss) String() string {
	s := w.kind.String()
	if w.keys != nil {
		s += " of " + strings.Join(w.keys, ",")
	}
	if w.kind == lossRewind {
		s += fmt.Sprintf(" by %v", w.back)
	}
	return s
}

// drawLosses gives two seeds in five one or two state losses, each at a
// moment off the clock's grid of steps (a restart takes time: no grant
// shares its instant with one made before it).
func (p *plan) drawLosses(r *rand.Rand) {
	if r.IntN(5) >= 2 {
		return
	}
	for range 1 + r.IntN(2) {
		w := stateLoss{kind: lossKind(1 + r.IntN(4)),
			at: p.start.Add(time.Duration(10+r.Int64N(int64(p.span/time.Second)-20))*time.Second +
				time.Duration(1+r.IntN(999))*time.Millisecond)}
		if w.kind == lossMarks || w.kind == lossRewind {
			if r.IntN(2) == 0 { // some keys only
				for _, sp := range p.scheds {
					if r.IntN(2) == 0 {
						w.keys = append(w.keys, sp.ID)
					}
				}
				if w.keys == nil {
					w.keys = []string{p.scheds[0].ID}
				}
			}
			w.back = time.Duration(2+r.IntN(40)) * time.Second
		}
		if w.kind != lossRewind {
			w.back = 0
		}
		p.losses = append(p.losses, w)
	}
	slices.SortFunc(p.losses, func(a, b stateLoss) int { return a.at.Compare(b.at) })
}

// loseState carries out the losses due at now (only the memory backend
// has any: realPlan drops them).
func (c *cluster) loseState(now time.Time) {
	for _, w := range c.plan.losses {
		if !w.at.Equal(now) {
			continue
		}
		m, ok := c.mem.(stateLoser)
		if !ok {
			panic(fmt.Sprintf("sim: a state loss planned on a backend that cannot lose state (%T)", c.mem))
		}
		switch w.kind {
		case lossRestart:
			m.DropLocks()
			m.ForgetMarks()
			m.ForgetFences()
		case lossMarks:
			m.ForgetMarks(w.keys...)
		case lossRewind:
			m.RewindMarks(w.back, w.keys...)
		case lossFences:
			m.ForgetFences()
		}
		c.event(now, "backend loses state: %v", w)
	}
}

// nextLoss is the first loss after now (zero: none), where the clock
// must stop.
func (p *plan) nextLoss(now time.Time) time.Time {
	for _, w := range p.losses {
		if w.at.After(now) {
			return w.at
		}
	}
	return time.Time{}
}

// lostMarks reports whether key's mark was forgotten or set back in
// [from, to); lostLocks whether the locks were dropped then. A loss is
// carried out once the cluster is quiet at its instant: after the calls
// the backend answered at that instant, so a grant made then (from) came
// before it, and a loss at to came after the grant made at to.
func (p *plan) lostMarks(key string, from, to time.Time) bool {
	return slices.ContainsFunc(p.losses, func(w stateLoss) bool {
		return w.marks(key) && !w.at.Before(from) && w.at.Before(to)
	})
}

func (p *plan) lostLocks(from, to time.Time) bool {
	return slices.ContainsFunc(p.losses, func(w stateLoss) bool {
		return w.locks() && !w.at.Before(from) && w.at.Before(to)
	})
}

// overlapAfterLoss reports whether runs a and b of an overlap = "skip"
// schedule (b started while a ran) may overlap because the backend lost
// the locks between their grants: a's lock was gone, and b's grant is
// legitimate if its fence is above a's (invariant 1's rule for a loss of
// state, applied to the schedule's lock). a's job ends at its next
// renewal, which the lost lock fails.
//
// The grants are taken in the order they were made, which is not always
// the runs' order: a run granted before the loss may start after one
// granted after it (a jitter, a manual run's take; simwide seed 243: a
// tick granted at the restart, started 2s later, and a trigger taken
// after the restart, with the higher fence).
func (c *cluster) overlapAfterLoss(a, b run) bool {
	ga, okA := c.grantOf(a)
	gb, okB := c.grantOf(b)
	// A re-run of a lost run (rerun.go) holds the schedule's lock from a
	// plain try-lock, not a grant: its lock was taken before its start,
	// under its fence (seed 31090: a re-run's lock lost in a backend
	// restart, the next tick granted beside it).
	if r := a; !okA && !r.manual && r.firstAttempt > 1 {
		ga, okA = grant{at: r.start, fence: r.fence}, true
	}
	if r := b; !okB && !r.manual && r.firstAttempt > 1 {
		gb, okB = grant{at: r.start, fence: r.fence}, true
	}
	if gb.at.Before(ga.at) {
		ga, gb = gb, ga
	}
	return okA && okB && ga.at.Before(gb.at) && c.plan.lostLocks(ga.at, gb.at) && gb.fence > ga.fence
}

// grantOf is the grant run r ran on (ok false: none, invariant 1b's).
func (c *cluster) grantOf(r run) (grant, bool) {
	for _, g := range c.grants.all() {
		if g.key == r.sched && g.tick.Equal(r.tick) && g.node == r.node && g.fence == r.fence {
			return g, true
		}
	}
	return grant{}, false
}

// lossNear reports whether tick t of sp is left out of the liveness check
// (invariant 3) for a loss of the backend's state: one in t's window
// [from, to], or one that forgot sp's mark before t with no grant of sp
// since. A missing mark counts as the backend's time minus max_clock_skew
// (locking.DecideTick), and a tick asked that late is done; the
// simulation's nodes ask on a grid of whole steps (a second, the skew), so
// a node whose clock is behind asks exactly that late and is told done,
// which leaves the mark missing: only a grant (of a node asking within the
// skew) or a node's start (InitMarks) brings it back. A manual run's take
// does not: it takes the schedule's lock, not a tick, and leaves the mark
// alone (seeds 16180, 16833, 40735, 10429: marks forgotten, a trigger or
// a backfill taken after, and every later tick told done on every node).
func (c *cluster) lossNear(sp *schedPlan, t, from, to time.Time) bool {
	for _, w := range c.plan.losses {
		if !w.at.Before(from) && !w.at.After(to) {
			return true
		}
		if w.kind == lossRewind || !w.marks(sp.ID) || !w.at.Before(t) {
			continue
		}
		back := false
		for _, g := range c.uniqueGrants() {
			if g.key == sp.ID && !g.manual && g.at.After(w.at) && g.at.Before(t) {
				back = true
				break
			}
		}
		for _, l := range c.lives {
			back = back || l.startedAt.After(w.at) && l.startedAt.Before(t)
		}
		if !back {
			return true
		}
	}
	return false
}
