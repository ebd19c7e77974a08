package sim

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Invariant 8, the audit's: every tick of a locked schedule that its mark
// has passed is in history, as a run (its record, or its start) or as a
// skip (scheduler.SkipRecord). `audit` (internal/ops/audit.go) calls such
// a tick with neither "lost"; here the same question is asked of the
// records the nodes wrote (ledger.go's observer), against the mark the
// backend holds once the run ended.

const invAudit = "8 audit: no locked tick its mark passed is lost"

// holePausedReplyLost: a try-lock-tick answered paused or missed (the
// backend raised the mark to T) whose reply the link lost, and whose node
// heard no answer to any resend of it either (every reply lost, or the
// node died or gave up first): it recorded nothing, neither T nor the
// ticks the step passed the mark over. The audit shows T (and that gap)
// lost. A resend answered from the backend's verdict record carries the
// verdict and the step's Before, and its node records both: a tick lost
// though a resend's answer was heard is no known hole.
const holePausedReplyLost = "paused or missed verdict's reply lost: the mark raised, nothing recorded"

// holeGrantGapReplyLost: a try-lock-tick granted T with the mark below an
// earlier tick T' (Before), its reply lost: the step passed the mark over
// the ticks between, which only the node that hears an answer records
// (`stopped`, scheduler's recordGap), and its node heard no answer to any
// resend of it either (every reply lost, or it died or gave up first: it
// records T not run, grant unknown, without the gap). The ticks between
// are answered done to every later ask (seed 709: s1@+16s granted, its
// reply and its resend's lost, mark before +7s; s1@+14s recorded by no
// one). A resend answered from the grant's record carries the step's
// Before, and its node records the gap: a tick lost though such an answer
// was heard is no known hole. T itself is invariant 2's (granted).
const holeGrantGapReplyLost = "granted verdict's reply lost: the ticks the step passed the mark over recorded by no one"

// verdict is one try-lock-tick answer the backend gave.
type verdict struct {
	node      string
	life      int
	key       string
	tick      time.Time
	v         locking.TickVerdict
	mark      time.Time // the answer's Mark: the mark after the step
	before    time.Time // the answer's Before (zero: none)
	at        time.Time // true time the backend answered
	delivered bool      // the node heard the answer
	cut       bool      // the answer landed after its node crashed
	dup       bool      // a duplicated call's late copy (link_dup.go): heard by no one
	token     string    // a grant's
	// again: a grant answered from the record of an earlier grant of its
	// token (a resend's), or a paused or missed verdict from the record of
	// its request's first attempt: it decides nothing and leaves the mark
	// alone.
	again bool
}

// raised reports whether the step raised the key's mark to its tick.
func (v verdict) raised() bool { return v.v.Raised() && !v.again }

// verdictLog is every try-lock-tick answer, in the order the links logged
// them (each after its call returned), and the times InitMarks was applied
// per key.
type verdictLog struct {
	mu   sync.Mutex
	vs   []verdict
	init map[string]time.Time // the first InitMarks applied, per key
	// granted are the tokens granted so far.
	granted map[string]bool
}

func (l *link) logVerdict(r locking.TickRequest, ans locking.TickAnswer, err error, delivered, dup bool) {
	if err != nil {
		return
	}
	v := verdict{node: l.node, life: l.life, key: r.Key, tick: r.Tick, v: ans.Verdict,
		mark: ans.Mark, before: ans.Before, at: l.c.clock.Now(), delivered: delivered,
		cut: l.cut.Load(), dup: dup}
	if ans.Verdict == locking.TickGranted && ans.Handle != nil {
		v.token = ans.Handle.Token()
	}
	cl := &l.c.verdicts
	cl.mu.Lock()
	if cl.granted == nil {
		cl.granted = map[string]bool{}
	}
	if v.token != "" {
		v.again = cl.granted[v.token]
		cl.granted[v.token] = true
	}
	if (ans.Verdict == locking.TickPaused || ans.Verdict == locking.TickMissed) && r.Token != "" {
		// A resend answered paused or missed from the record of its first
		// attempt's verdict (the lock contract's paused/missed records)
		// decides nothing again either (seed 32814: a missed verdict of
		// +43s answered again to a resend at +52s, after the marks were
		// forgotten at +49.2s, read as the first raise after the loss).
		k := "pm/" + r.Key + "/" + r.Token
		v.again = cl.granted[k]
		cl.granted[k] = true
	}
	cl.vs = append(cl.vs, v)
	cl.mu.Unlock()
}

func (l *link) logInitMarks(keys []string) {
	cl := &l.c.verdicts
	now := l.c.clock.Now()
	cl.mu.Lock()
	if cl.init == nil {
		cl.init = map[string]time.Time{}
	}
	for _, k := range keys {
		if _, ok := cl.init[k]; !ok {
			cl.init[k] = now
		}
	}
	cl.mu.Unlock()
}

func (g *verdictLog) all() ([]verdict, map[string]time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	init := make(map[string]time.Time, len(g.init))
	for k, t := range g.init {
		init[k] = t
	}
	return slices.Clone(g.vs), init
}

// checkAudit: invariant 8. For each locked schedule whose backend keeps a
// mark, every tick of the spec in force at it (segments: a reload's) from
// the schedule's first mark on up to the final mark has a run record, a
// start record or a skip record, from any node. Excused, as the audit
// cannot see them and the product can do no better:
//
//   - a tick granted to a node: whether its grant started a run or was
//     recorded is invariant 2's question (checkGrantsRun), which excuses a
//     node that died holding it and reports the rest;
//   - a tick the backend's loss of state explains (lossExplains);
//   - a tick whose mark-raising verdict reached a node that died with it
//     (a crashed process writes no history);
//   - a tick of the spec a reload replaced, decided by no node before the
//     reload (reloadedOver).
//
// A tick whose mark-raising step never reached its node for a lost reply,
// nor any answer to a resend of it (heardAgain), is a known hole:
// holePausedReplyLost (a paused or missed step's tick, or a tick it passed
// the mark over), holeGrantGapReplyLost (a tick a grant's step passed the
// mark over).
func (c *cluster) checkAudit() []violation {
	mr, ok := c.mem.(locking.MarkReader)
	if !ok {
		// In real time (realtime.go) the backend reads no marks and is
		// closed before the checks: invariant 8 is the memory backend's
		// only, for now.
		return nil
	}
	recorded := map[string]bool{}
	c.ledger.mu.Lock()
	for _, h := range c.history {
		recorded[fmt.Sprint(h.Schedule, h.Tick.UnixNano())] = true
	}
	for _, s := range c.starts {
		recorded[fmt.Sprint(s.Schedule, s.Tick.UnixNano())] = true
	}
	for _, s := range c.skipRecs {
		recorded[fmt.Sprint(s.Schedule, s.Tick.UnixNano())] = true
	}
	died := map[[2]any]time.Time{}
	for _, l := range c.lives {
		if l.crashed {
			died[[2]any{l.node, l.life}] = l.diedAt
		}
	}
	c.ledger.mu.Unlock()
	granted := map[string]bool{}
	for _, g := range c.uniqueGrants() {
		granted[fmt.Sprint(g.key, g.tick.UnixNano())] = true
	}
	vs, init := c.verdicts.all()
	var out []violation
	for i := range c.plan.scheds {
		sp := &c.plan.scheds[i]
		if !locked(sp.Schedule) {
			continue
		}
		mark, marked, err := mr.Mark(context.Background(), sp.ID)
		if err != nil || !marked {
			continue // no mark: every tick is undecided to the audit
		}
		var mine []verdict
		for _, v := range vs {
			if v.key == sp.ID {
				mine = append(mine, v)
			}
		}
		// The schedule's ticks begin after its mark was first set: by
		// InitMarks (at the backend's time), or by a step that raised a
		// missing mark (to its tick). Before that, no tick was its.
		start, ok := init[sp.ID]
		for _, v := range mine {
			if v.raised() && (!ok || v.tick.Add(-time.Nanosecond).Before(start)) {
				start, ok = v.tick.Add(-time.Nanosecond), true
			}
		}
		if !ok {
			continue
		}
		for _, seg := range c.segments(sp) {
			spec := sp.spec(seg.cron)
			for t := spec.Next(later(seg.from, start)); !t.IsZero() && t.Before(seg.to) && !t.After(mark); t = spec.Next(t) {
				k := fmt.Sprint(sp.ID, t.UnixNano())
				if recorded[k] || granted[k] || c.lossExplains(sp.ID, t, mine) {
					continue
				}
				v, ok := raiserOf(mine, t)
				if ok && c.reloadedOver(sp.ID, t, v) {
					continue
				}
				if ok && (v.cut || c.diedWithin(died, v, step)) {
					continue // its node died with the verdict in hand: a dead process writes nothing
				}
				if ok && !v.delivered && !v.dup {
					// Its reply lost, the node resends for as long as the
					// backend keeps the step's record, as for a grant
					// (invariant 2's hold, checkGrantsRun): a node whose
					// life ended before a resend was answered (seed 766:
					// paused at +30s, reply lost, crashed at +35.2s) never
					// learnt of the step, and a dead process writes nothing.
					hold := locking.GrantKeep(ttl(sp.Schedule), 0) + locking.GrantKeep(max(ttl(sp.Schedule), c.maxTTL()), 0)
					if c.lifeEndedWithin(v.node, v.life, v.at, v.at.Add(hold)) {
						continue
					}
				}
				msg := fmt.Sprintf("%s@%s lost: the mark (%s) passed it, and no node recorded it run or skipped", sp.ID, c.at(t), c.at(mark))
				if ok {
					msg += fmt.Sprintf("; the step that passed it: %s/%d %s@%s %v at %s (mark before %s, reply delivered %v, copy %v)",
						v.node, v.life, v.key, c.at(v.tick), v.v, c.at(v.at), c.atOrNone(v.before), v.delivered, v.dup)
				}
				vl := violation{inv: invAudit, at: t, msg: msg}
				switch {
				case !ok || v.delivered || v.dup || heardAgain(mine, v):
				case v.v == locking.TickPaused || v.v == locking.TickMissed:
					vl.known = holePausedReplyLost
				case v.v == locking.TickGranted:
					vl.known = holeGrantGapReplyLost
				}
				out = append(out, vl)
			}
		}
	}
	return out
}

func (c *cluster) atOrNone(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return c.at(t)
}

// heardAgain reports whether v's node heard an answer of v's verdict to a
// resend of v's request (the same node life and tick): answered from the
// backend's record, it carries v's Before, and the node records the ticks
// v's step passed the mark over (and, paused or missed, T).
func heardAgain(vs []verdict, v verdict) bool {
	for _, u := range vs {
		if u.delivered && !u.dup && u.node == v.node && u.life == v.life && u.tick.Equal(v.tick) && u.v == v.v {
			return true
		}
	}
	return false
}

// diedWithin reports whether v's node life crashed within d after v.
func (c *cluster) diedWithin(died map[[2]any]time.Time, v verdict, d time.Duration) bool {
	at, ok := died[[2]any{v.node, v.life}]
	return ok && !at.Before(v.at) && !at.After(v.at.Add(d))
}

// raiserOf is the first step (in the log's order) that raised the mark to
// t or past it from below t: the decision that consumed t.
func raiserOf(vs []verdict, t time.Time) (verdict, bool) {
	for _, v := range vs {
		if v.raised() && !v.tick.Before(t) && (v.before.IsZero() || v.before.Before(t)) {
			return v, true
		}
	}
	return verdict{}, false
}

// lossExplains reports whether tick t of key is unrecorded for a loss of
// the backend's state (loss.go): a loss that forgot key's mark at L, t
// after the highest tick a step raised the mark to before L, and t at or
// before where the first raising step after L found the mark (its Before:
// a mark set again by InitMarks, or raised to a node's Floor by a done
// step, with the ticks between recorded as its gap), or, the mark still
// missing then, that step's own tick (a missing mark counts as the
// backend's clock less max_clock_skew, so the ticks in between were
// answered done, recorded by no one). What the mark was before the loss
// no longer bounds anything the backend decides after it. A resend
// answered from its grant's record is no such step (raised: seed 2990,
// marks forgotten at +105.073s, a resend of s1@+100s answered granted at
// +109s, and s1@+110s, granted at +111s on the missing mark, the step
// that passed +106s and +108s).
func (c *cluster) lossExplains(key string, t time.Time, vs []verdict) bool {
	for _, w := range c.plan.losses {
		if !w.marks(key) || w.kind == lossRewind {
			continue
		}
		var low time.Time
		for _, v := range vs {
			if v.raised() && !v.at.After(w.at) && v.tick.After(low) {
				low = v.tick
			}
		}
		if !t.After(low) {
			continue
		}
		up := c.plan.start.Add(c.plan.span).Add(time.Hour) // no raising step after it: up to the end
		for _, v := range vs {
			if v.raised() && v.at.After(w.at) {
				up = v.tick
				if !v.before.IsZero() && v.before.Before(up) {
					up = v.before
				}
				break
			}
		}
		if !t.After(up) {
			return true
		}
	}
	return false
}

// reloadedOver reports whether tick t of key, of the spec in force before
// key's reload, was passed over by a step v made after the reload: every
// node then had the new spec (a frozen one reloads as it resumes, before
// it decides anything), and a step records as its gap only the ticks of
// the spec its node has (scheduler's recordGap). An old tick left
// undecided at the reload (its node handles a tick at the first step of
// the clock after it fires: seed 179, s2@+29s every second, reloaded to
// every 3 seconds at +29.252s, its next decision at +36s with the mark at
// +24s) is no tick of the schedule any more: `audit` reads the current
// spec and never asks about it.
func (c *cluster) reloadedOver(key string, t time.Time, v verdict) bool {
	op, ok := c.plan.reloadOf(key)
	return ok && t.Before(op.at) && !v.at.Before(op.at)
}
