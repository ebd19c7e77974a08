package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Frozen nodes: a node life stops dead for a while (a long GC
// pause, SIGSTOP, a VM paused by its host) and then goes on. While it is
// frozen its clock still moves (it reads the true time plus its offset on
// resume), but none of its timers fire, none of its calls go out and no
// answer reaches it; on resume everything that fell due meanwhile fires
// at once, late. Its jobs are in the process (the simulation's jobs are
// goroutines): they stop too. The windows are drawn from a stream of
// their own and always lie inside one life, ending a few seconds before
// it does.

// freezeWindow is one life's freeze, in true time.
type freezeWindow struct {
	node     string
	life     int
	from, to time.Time
}

// drawFreezes freezes one life of a fifth of the nodes once, for 3 to 20
// seconds: longer than most leases.
func (p *plan) drawFreezes(r *rand.Rand) {
	for _, n := range p.nodes {
		if r.IntN(5) != 0 {
			continue
		}
		k := r.IntN(len(n.lives))
		l := n.lives[k]
		d := time.Duration(3+r.IntN(18)) * time.Second
		lo, hi := l.from.Add(3*time.Second), l.to.Add(-5*time.Second-d)
		if !hi.After(lo) {
			continue
		}
		from := lo.Add(time.Duration(r.Int64N(int64(hi.Sub(lo)))))
		p.freezes = append(p.freezes, freezeWindow{node: n.id, life: k, from: from, to: from.Add(d)})
	}
}

func (p *plan) freezesString() string {
	var b strings.Builder
	for _, f := range p.freezes {
		fmt.Fprintf(&b, "  freeze %s/%d +%v..+%v\n", f.node, f.life, f.from.Sub(p.start), f.to.Sub(p.start))
	}
	return b.String()
}

// frozenWithin reports whether node's life was frozen at some time in
// [from, to]; any life of node when life < 0.
func (c *cluster) frozenWithin(node string, life int, from, to time.Time) (freezeWindow, bool) {
	for _, f := range c.plan.freezes {
		if f.node == node && (life < 0 || f.life == life) && f.from.Before(to) && f.to.After(from) {
			return f, true
		}
	}
	return freezeWindow{}, false
}

// frozenPast reports whether attempt a ran past its lease deadline only
// because its life was frozen over the deadline: a frozen process can do
// nothing about it, and its job, frozen too, did nothing meanwhile. It
// must end within its endLag (the kill grace of checkLeases) of the resume.
func (c *cluster) frozenPast(a attempt, deadline time.Time) bool {
	// The deadline's timer fires at the grid point after it, and a job
	// that ignores SIGTERM runs on for the kill grace after that: a
	// freeze starting before the job had to end holds its end back too
	// (seeds 367797, 232827: frozen in the kill grace, a step after the
	// deadline; the grace's timer is on the frozen clock).
	lag := c.endLag(a.sched)
	f, ok := c.frozenWithin(a.node, a.life, deadline, deadline.Add(lag))
	return ok && !a.end.After(f.to.Add(lag))
}

// frozenOver reports whether run prev, still running at t by the ledger,
// was frozen between its start and t and ended within a step of its
// resume: it did nothing while frozen (another node may rightly have
// taken the lock its lease lost meanwhile, or at the resume before the
// resumed node could cancel), and was stopped as soon as it could be.
func (c *cluster) frozenOver(prev run, t time.Time) bool {
	f, ok := c.frozenWithin(prev.node, prev.life, prev.start, t.Add(time.Nanosecond))
	return ok && !prev.end.IsZero() && !prev.end.After(f.to.Add(c.endLag(prev.sched)))
}

// endLag is how long after it is cancelled a job of sched may still be
// seen running: a step (it tells the ledger at the next point the clock
// stops at), and the kill grace when it ignores SIGTERM.
func (c *cluster) endLag(sched string) time.Duration {
	if c.sched(sched).ignoreTerm {
		return step + killGrace
	}
	return step
}

// freezer is one life's frozen state.
type freezer struct {
	mu   sync.Mutex
	thaw chan struct{} // nil while not frozen; closed on resume
}

func (f *freezer) freeze() {
	f.mu.Lock()
	if f.thaw == nil {
		f.thaw = make(chan struct{})
	}
	f.mu.Unlock()
}

func (f *freezer) resume() {
	f.mu.Lock()
	if f.thaw != nil {
		close(f.thaw)
		f.thaw = nil
	}
	f.mu.Unlock()
}

// frozen reports whether the life is frozen now (false for nil: a life
// that never freezes).
func (f *freezer) frozen() bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.thaw != nil
}

// wait returns once the life is not frozen (at once when it is not).
func (f *freezer) wait() {
	if f == nil {
		return
	}
	f.mu.Lock()
	ch := f.thaw
	f.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// freezeClock is a life's clock: the fake clock plus the life's offset,
// whose timers hold what they fire while the life is frozen.
type freezeClock struct {
	c      scheduler.Clock
	offset time.Duration
	f      *freezer
}

var _ scheduler.Clock = freezeClock{}

func (k freezeClock) Now() time.Time { return k.c.Now().Add(k.offset) }

// AfterFunc runs fn once due and the life not frozen.
func (k freezeClock) AfterFunc(d time.Duration, fn func()) scheduler.Timer {
	return k.c.AfterFunc(d, func() {
		k.f.wait()
		fn()
	})
}

// NewTimer returns a timer whose value is sent once due and the life not
// frozen. Stop and Reset keep Go 1.23 semantics: a value held by the
// freeze from before them is never sent.
func (k freezeClock) NewTimer(d time.Duration) scheduler.Timer {
	t := &freezeTimer{k: k, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

type freezeTimer struct {
	k  freezeClock
	ch chan time.Time

	mu      sync.Mutex
	gen     uint64          // bumped by Stop and Reset: older firings are dropped
	under   scheduler.Timer // the fake clock's timer of this arming
	pending bool            // fired, held by the freeze
}

func (t *freezeTimer) C() <-chan time.Time { return t.ch }

func (t *freezeTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopLocked()
}

func (t *freezeTimer) stopLocked() bool {
	t.gen++
	select {
	case <-t.ch:
	default:
	}
	was := t.pending
	t.pending = false
	if t.under != nil && t.under.Stop() {
		was = true
	}
	return was
}

func (t *freezeTimer) Reset(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.stopLocked()
	gen := t.gen
	t.under = t.k.c.AfterFunc(d, func() {
		t.mu.Lock()
		if t.gen != gen {
			t.mu.Unlock()
			return
		}
		t.pending = true
		t.mu.Unlock()
		t.k.f.wait()
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.gen != gen || !t.pending {
			return
		}
		t.pending = false
		select {
		case t.ch <- t.k.Now():
		default:
		}
	})
	return was
}

// hold waits while l's life is frozen, and returns a func that does it
// again: a call waits before it goes out and before its answer comes
// back (deferred), so a frozen process neither sends nor hears.
func (l *link) hold() func() {
	l.frz.wait()
	return l.frz.wait
}

// clock is the life's clock, for its jobs: frozen with it.
func (l *lifeState) clock(c *cluster) scheduler.Clock {
	if l.frz == nil {
		return c.clock
	}
	return freezeClock{c.clock, 0, l.frz}
}

// untilNextFreeze shortens d so that the clock stops at the next freeze
// or resume.
func (c *cluster) untilNextFreeze(now time.Time, d time.Duration) time.Duration {
	for _, f := range c.plan.freezes {
		for _, at := range []time.Time{f.from, f.to} {
			if at.After(now) {
				d = min(d, at.Sub(now))
			}
		}
	}
	return d
}

// operateFreezes freezes and resumes the lives due at now.
func (c *cluster) operateFreezes(now time.Time) {
	for _, f := range c.plan.freezes {
		for _, l := range c.lives {
			if l.node != f.node || l.life != f.life || l.frz == nil {
				continue
			}
			switch {
			case f.from.Equal(now):
				c.event(now, "%s/%d freezes (until %s)", l.node, l.life, c.at(f.to))
				l.frz.freeze()
				c.freezeStats++
			case f.to.Equal(now):
				c.event(now, "%s/%d resumes", l.node, l.life)
				l.frz.resume()
			}
		}
	}
}
