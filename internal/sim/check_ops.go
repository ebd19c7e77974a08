package sim

import (
	"fmt"
	"time"
)

// The invariants' side of the operators' actions (plan_ops.go,
// cluster_ops.go).
//
// A manual run is keyed by its run id (the request's id), not by its tick:
// a trigger's tick is the time it was accepted, and a backfill runs a tick
// its regular run already decided (ran, skipped or missed) once more. So
// invariant 1 for manual runs is: each request runs once (one first
// attempt, on one node), and a backfill never races its tick's regular
// run (1c). Their takes are grants (invariants 1b, 2, 4, 5 hold for them
// as for a tick's); they do not read the pause flag (a trigger runs a
// paused schedule: OPERATING.md), so 6b leaves them out.

// A take-request whose reply is lost took the schedule's lock and, for a
// trigger, removed the request from the queue in the same atomic step.
// TakeRequest is resent with its token (the agent's poll and the
// harness's): the backend answers a resend from its record of the take.
// When every resend went unanswered too (seed 787: the known hole
// holeTakeLost until then), the trigger lived only in the take's record:
// now it goes back to the head of its queue once the schedule's lock is
// free with no renewal or release from its taker (cluster.Store's
// TakeRequest; the scheduler renews a manual run's lock before the run
// starts, so a run that started is never requeued), and a later take runs
// it. checkGrantsRun excuses such a lost take when its request ran;
// checkManual checks it ran once.

const invBackfill = "1c a backfill runs a tick its regular run had decided"

// checkManual: each manual request runs once; a backfill's tick had been
// decided by the mark read its acceptance rested on: no regular grant of
// that tick was issued after the read returned, unless the backend forgot
// or set back the schedule's mark after the read and before that grant
// (loss.go), which is invariant 1's excuse and takes invariant 1's fence
// rule: the regular grant's fence is above the backfill's take's, so a
// fenced resource refuses the backfill's late writes. A store that lost
// the mark no longer knows the tick was decided, and nothing the
// scheduler could read before the loss tells it that it will be (seeds
// 4633, 7007, 11965, 30273: a rewind put the mark before the backfilled
// tick, and a node's catch-up or a late tick claimed it again).
func (c *cluster) checkManual() []violation {
	var vs []violation
	first := map[string][]attempt{}
	for _, a := range c.ledger.all() {
		if a.manual && a.attempt == 1 {
			first[a.runID] = append(first[a.runID], a)
		}
	}
	for id, as := range first {
		for i := 1; i < len(as); i++ {
			if c.backfillRetaken(id, as[i-1], as[i]) {
				continue
			}
			vs = append(vs, violation{inv: invTwice, at: as[i].start, msg: fmt.Sprintf("manual request %s ran twice:\n    %v\n    %v",
				id, &as[i-1], &as[i])})
		}
	}
	c.opsMu.Lock()
	bfs := append([]acceptedBackfill(nil), c.backfills...)
	c.opsMu.Unlock()
	for _, b := range bfs {
		if b.read.seq == 0 {
			vs = append(vs, violation{inv: invBackfill, at: b.at, msg: fmt.Sprintf("backfill of %s@%s accepted by %s without reading the mark",
				b.sched, c.at(b.tick), b.node)})
			continue
		}
		for _, g := range c.uniqueGrants() {
			if !g.manual && g.key == b.sched && g.tick.Equal(b.tick) && g.issued > b.read.seq &&
				!(c.plan.lostMarks(b.sched, b.read.at, g.at) && g.fence > b.fence) {
				vs = append(vs, violation{inv: invBackfill, at: g.at, msg: fmt.Sprintf("%s@%s backfilled by %s (accepted at %s), then granted to its regular run on %s/%d fence %d",
					b.sched, c.at(b.tick), b.node, c.at(b.at), g.node, g.life, g.fence)})
			}
		}
	}
	return vs
}

// ugCache is set while check runs: uniqueGrants' answer.
type checkCache struct{ ugCache []grant }

// refusedTake reports whether the scheduler refused the manual run its
// take (by token) was for.
func (c *cluster) refusedTake(token string) bool {
	c.opsMu.Lock()
	defer c.opsMu.Unlock()
	return c.refused[token]
}

// manualHeld reports whether a manual run of sched held (or may have
// held) its lock at some time in [from, to]: from its take until its run
// ended, or for its TTL when no run followed. A regular tick meanwhile
// finds the lock held, and is caught up after the run only within its
// catch-up window.
func (c *cluster) manualHeld(sched string, from, to time.Time, all []run) bool {
	ends := map[string]time.Time{}
	for _, r := range all {
		if r.manual && r.sched == sched {
			e := r.end
			if e.IsZero() {
				e = to // never ended: held throughout
			}
			ends[fmt.Sprint(r.node, r.life, r.fence)] = e
		}
	}
	for _, g := range c.uniqueGrants() {
		if !g.manual || g.key != sched {
			continue
		}
		end, ok := ends[fmt.Sprint(g.node, g.life, g.fence)]
		if !ok || end.Before(g.at.Add(g.ttl)) {
			end = g.at.Add(g.ttl)
		}
		if g.at.Before(to) && end.After(from) {
			return true
		}
	}
	return false
}

// nearReload reports whether tick t of sched lies near the schedule's
// reload: the nodes reload at one true time but read it on clocks up to
// the skew apart, a tick due at the reload may run by either spec, and
// the reload's catch-up may run the old spec's last tick late.
func (c *cluster) nearReload(sched string, t time.Time) bool {
	op, ok := c.plan.reloadOf(sched)
	if !ok {
		return false
	}
	_, old := c.plan.timing(sched, op.at.Add(-time.Nanosecond))
	from := op.at.Add(-max(c.maxTTL(), releaseWait) - 2*step - maxSkew - old)
	to := op.at.Add(old + op.period + 2*step + maxSkew)
	return within(t, from, to)
}

// segment is a span of time over which one spec of a schedule is in force.
type segment struct {
	from, to time.Time
	cron     string
	period   time.Duration
}

// segments are sched's specs in force over the run, in order.
func (c *cluster) segments(sp *schedPlan) []segment {
	end := c.plan.start.Add(c.plan.span)
	op, ok := c.plan.reloadOf(sp.ID)
	if !ok {
		return []segment{{c.plan.start, end, sp.CronExpr, sp.period}}
	}
	return []segment{{c.plan.start, op.at, sp.CronExpr, sp.period}, {op.at, end, op.cron, op.period}}
}

// backfillRetaken reports whether b, a later run of backfill request id
// than a, ran from a take of its own made before the backfill's Done: a
// backfilled tick stays at the head of its queue until Done, so a node
// that dies or loses its lease mid-backfill leaves it to another once its
// lock is free (cluster.Store's TakeRequest, DESIGN.md: at least once,
// under a higher fence; seed 193: a node frozen past its lease, the
// backfill taken again by another node's poll). A run from a take after
// the Done, or under the same take, is a second run.
func (c *cluster) backfillRetaken(id string, a, b attempt) bool {
	if b.fence <= a.fence {
		return false
	}
	c.opsMu.Lock()
	done, ok := c.doneSeq[id]
	c.opsMu.Unlock()
	for _, g := range c.uniqueGrants() {
		if g.manual && g.backfill && g.runID == id && g.node == b.node && g.life == b.life && g.fence == b.fence {
			return !ok || g.issued < done
		}
	}
	return false
}
