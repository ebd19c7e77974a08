package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Invariant 3, liveness: a locked tick runs once when nothing excused its
// loss. The healthy window is conservative, so that a tick it keeps is one
// the contract says must run; it is a starting point to tighten, not the
// contract's last word. A tick T of schedule S is checked when, over
// [T - (the longest TTL or releaseWait + 2 steps), T + S's jitter + 2 steps]:
//
//   - no node's link had a fault window (a lost reply leaves a lock
//     held until its TTL, a stall makes a decision late);
//   - no node life started, stopped or crashed (a crashed holder's lease
//     lives a TTL; a start runs the catch-up);
//   - no node life running then had its clock beyond max_clock_skew;
//   - at least one node was running;
//   - S was not paused around T (paused ticks are consumed);
//   - the backend lost no state in it, and S's mark was not left missing
//     by an earlier loss (loss.go, lossNear);
//   - under overlap = "skip", no earlier run of S was still going a step
//     before T, or holding its lock for a retry (lockEnd): its lock, or
//     its jitter's, keeps T from running, rightly;
//
// and T's catch-up window (one period) ended a step before the cluster
// was stopped, and T came a step after the cluster started.

func (c *cluster) checkLiveness(all []run) []violation {
	count := map[string][]run{}
	for _, r := range all {
		if r.manual {
			continue // a backfill's run is not its tick's regular run
		}
		k := fmt.Sprint(r.sched, r.tick.UnixNano())
		count[k] = append(count[k], r)
	}
	var vs []violation
	for i := range c.plan.scheds {
		sp := &c.plan.scheds[i]
		if !locked(sp.Schedule) {
			continue
		}
		// A reload changes which ticks exist: each tick is one of the
		// spec in force at it (segments).
		for _, seg := range c.segments(sp) {
			spec := sp.spec(seg.cron) // its zone and spread too
			in := *sp
			in.CronExpr, in.period = seg.cron, seg.period
			vs = append(vs, c.checkSegment(&in, spec, later(seg.from, c.plan.start.Add(step)), seg.to, count, all)...)
		}
	}
	return vs
}

// checkSegment checks the ticks of spec in (from, to) for liveness.
func (c *cluster) checkSegment(sp *schedPlan, spec cronspec.Spec, from, to time.Time, count map[string][]run, all []run) []violation {
	end := c.plan.start.Add(c.plan.span)
	var vs []violation
	{
		for t := spec.Next(from); t.Before(to) && t.Add(sp.period+sp.Jitter+2*step).Before(end); t = spec.Next(t) {
			if !c.healthy(sp, t, all) {
				continue
			}
			c.stats.checkedTicks++
			rs := count[fmt.Sprint(sp.ID, t.UnixNano())]
			if len(rs) == 0 {
				var near []string // the runs before and after, for the diagnosis
				for _, r := range all {
					if r.sched == sp.ID && r.tick.After(t.Add(-3*sp.period)) && r.tick.Before(t.Add(3*sp.period)) {
						near = append(near, "\n    "+r.String())
					}
				}
				vs = append(vs, violation{inv: invLiveness, at: t, msg: fmt.Sprintf("%s@%s never ran, in a healthy window; runs of %s near it:%s",
					sp.ID, c.at(t), sp.ID, strings.Join(near, ""))})
			}
		}
	}
	return vs
}

// healthy reports whether tick t of sp lies in a healthy window.
func (c *cluster) healthy(sp *schedPlan, t time.Time, all []run) bool {
	// A call of any schedule whose reply was lost keeps its caller
	// waiting until its deadline, up to the longest TTL (a try-lock-tick)
	// or releaseWait (a release), and meanwhile
	// its node holds back the releases of its ended runs (the pool's
	// later, up to maxDefer of real time: here, any number of steps).
	from, to := t.Add(-max(c.maxTTL(), releaseWait)-2*step), t.Add(sp.Jitter+2*step)
	for _, w := range c.plan.pauses {
		// Paused ticks are consumed, never run; the one at the resume
		// may be either side of it.
		if w.sched == sp.ID && t.After(w.from.Add(-step)) && t.Before(w.to.Add(sp.period+step)) {
			return false
		}
	}
	if sp.Group != "" {
		return false // a full group skips a tick by design (group_full)
	}
	if c.nearReload(sp.ID, t) || c.manualHeld(sp.ID, t.Add(-2*step), t.Add(sp.period+sp.Jitter+2*step), all) {
		return false
	}
	for _, f := range c.plan.freezes {
		// A frozen node is not healthy, and a lock it holds is held
		// until the freeze ends (its renewals stop) or its TTL runs out.
		if f.from.Before(to) && f.to.After(from) {
			return false
		}
	}
	if c.lossNear(sp, t, from, to) {
		return false
	}
	running := 0
	for _, n := range c.plan.nodes {
		for _, w := range n.faults {
			if w.from.Before(to) && w.to.After(from) {
				return false
			}
		}
	}
	// The lives as they were carried out: a restart waits for the process
	// before it to exit, so it may start later than planned.
	for _, l := range c.lives {
		lend := l.endedAt
		if lend.IsZero() {
			lend = to.Add(time.Nanosecond)
		}
		if within(l.startedAt, from, to) || within(l.endedAt, from, to) {
			return false
		}
		if l.startedAt.Before(to) && lend.After(from) {
			if l.plan.beyondSkew() {
				return false
			}
			if scheduler.Matches(sp.Nodes, c.nodeTags(l.node)) {
				running++ // a node it targets: one that asks
			}
		}
	}
	if running == 0 {
		return false
	}
	if sp.Overlap != scheduler.OverlapAllow { // skip or queue: the lock is the schedule's
		for _, r := range all {
			if r.sched == sp.ID && r.tick.Before(t) && (r.end.IsZero() || lockEnd(sp, r).After(t.Add(-step))) {
				return false
			}
		}
	}
	return true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func within(x, from, to time.Time) bool { return !x.Before(from) && !x.After(to) }

// lockEnd is when the lock of run r of sp may have been given back at the
// latest, r having ended. After a failed attempt with retries left, the
// lock is held through the backoff, and a retry that does not come (its
// lease ran out meanwhile) is known only to the scheduler: the lock may
// be held until the backoff or the lease ends.
func lockEnd(sp *schedPlan, r run) time.Time {
	if !r.lastFailed || r.attempts > sp.Retries {
		return r.end
	}
	backoff := sp.RetryBackoff << (r.attempts - 1)
	return r.end.Add(max(backoff, ttl(sp.Schedule)))
}

// releaseWait is the longest a release waits for its answer: the
// scheduler's release context (loop.go: releaseTimeout plus the second it
// is reused for).
const releaseWait = 6 * time.Second
