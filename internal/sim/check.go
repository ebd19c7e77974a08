package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	store "github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The invariants, checked on the ledger, the grant log and the history
// once a seed's cluster has stopped. Numbers follow docs/RELIABILITY.md's list.

// violation is one broken invariant.
type violation struct {
	inv string    // "1 no tick runs twice", …
	at  time.Time // true time it is about, for the trace
	msg string
	// known names the hole in the code under test this violation is
	// one of, when it is known and routed (see knownHoles); "" when new.
	known string
}

// Known holes: violations the simulation finds in the scheduler that are
// not fixed yet. TestSim reports them without failing unless -strict, so
// that the suite stays green while they are open and a new kind of
// violation still fails it. Once one stops appearing, delete it: it then
// fails again if it comes back.
//
// The resend hole ("a lost reply's resends go unanswered for as long as
// the backend keeps its grant's record") is deleted: the seeds it still
// labelled were a resend refused as ahead of the backend's clock, the
// first attempt delayed and granted once T was due (3149, 19170: the
// scheduler records such a tick not run, grant unknown, since), and a
// grant heard through its resend, counted unheard here (949). None in
// seeds 1..2000 since (nor 637, its last unexplained seed). So is the
// take hole (check_ops.go: a trigger whose take was never heard back goes
// back to its queue). None is open. Nor is the hole of a trigger whose
// take's confirming renewal was applied with its reply lost (the backend
// dropped it as heard, and its node did not run it): the node gives the
// take back (cluster.Store.GiveBack), and the trigger runs from a later
// take, once.
//
// Open: the two holes of invariant 8 (audit.go), ticks consumed by a
// try-lock-tick step whose reply was lost, and no answer to any resend of
// it heard either (a heard resend is answered from the backend's record,
// with the step's Before): holePausedReplyLost and holeGrantGapReplyLost.

// queuedAtEnd reports whether request id of schedule is on its queue now
// that the run ended, counting a trigger whose take's lock lapsed unheard
// (Queued puts it back first). A trigger taken unheard near the end (its
// replies lost, its node's poll cut by the end of the run: seeds 441988,
// 452522, 441315) is still the backend's, kept until its take's lock
// lapses: on the fake clock, the first call lets every lock lapse
// (lapseAll) before it asks, so that such a trigger counts as back.
func (c *cluster) queuedAtEnd(schedule, id string) bool {
	q, ok := c.mem.(requestLister)
	if !ok {
		return false
	}
	c.lapseAll()
	ctx := context.Background()
	if _, err := q.Queued(ctx); err != nil {
		return false
	}
	rs, err := q.Requests(ctx, schedule)
	return err == nil && slices.ContainsFunc(rs, func(r store.Request) bool { return r.ID == id })
}

// lapseAll moves the fake clock, once the cluster has stopped, past every
// lock taken (the longest TTL, and a step), so that the backend treats
// what it keeps for a take's lapse as it will (the contract's unheard
// trigger back on its queue). Nothing runs any more to see the time move.
// In real time locks lapse by themselves; nothing is moved.
func (c *cluster) lapseAll() {
	if c.fake == nil || c.lapsed {
		return
	}
	c.lapsed = true
	c.fake.Advance(c.maxTTL() + 2*step)
}

// Invariant names.
const (
	invTwice    = "1 no locked tick runs twice"
	invRerun    = "1r a lost run is re-run at most once, once its node died"
	invGrant    = "1b a locked run runs on a grant the backend made to its node"
	invLost     = "2 no grant lost"
	invLiveness = "3 liveness: a tick in a healthy window runs once"
	invFence    = "4 fences strictly increase per key"
	invLease    = "5 no job runs past its lease deadline"
	invOverlap  = "6 overlap skip: runs of a schedule never overlap"
	invPaused   = "6b a paused schedule starts no run after pause returned"
	invHistory  = "7 history holds every run that ended"
	// invAudit is audit.go's: "8 audit: no tick lost".
)

// run is a job's run: its attempts (retries are one run), by run id.
type run struct {
	sched, node string
	life        int
	tick        time.Time
	runID       string
	fence       int64
	start, end  time.Time // end zero: never ended (cannot be, after a stop)
	killed      bool
	attempts    int
	lastFailed  bool // its last attempt failed: a retry may have been due
	manual      bool // a trigger's or backfill's run (keyed by its run id)
	// firstAttempt is its first attempt's number: above 1 for a re-run of
	// a lost run (on_node_loss = "rerun", rerun.go).
	firstAttempt int
	refused      bool // the fenced store refused a write of one of its attempts
}

func (r run) String() string {
	return fmt.Sprintf("%s@%s on %s/%d fence %d run %.8s (%d attempts) %s..%s", r.sched,
		r.tick.UTC().Format("15:04:05"), r.node, r.life, r.fence, r.runID, r.attempts,
		r.start.Format("15:04:05.000"), r.end.Format("15:04:05.000"))
}

// runs groups the ledger's attempts into runs, in start order.
func runs(atts []attempt) []run {
	byID := map[string]*run{}
	var order []string
	for _, a := range atts {
		// A run id is the run's on one node life: a manual request's id
		// taken by two nodes (a violation) is two runs.
		id := fmt.Sprint(a.runID, "/", a.node, "/", a.life)
		r, ok := byID[id]
		if !ok {
			r = &run{sched: a.sched, node: a.node, life: a.life, tick: a.tick, runID: a.runID,
				fence: a.fence, start: a.start, manual: a.manual, firstAttempt: a.attempt}
			byID[id] = r
			order = append(order, id)
		}
		r.attempts++
		if a.start.Before(r.start) {
			r.start = a.start
		}
		switch { // the run ends with its last attempt; zero: one never ended
		case r.attempts == 1:
			r.end = a.end
		case r.end.IsZero() || a.end.IsZero():
			r.end = time.Time{}
		case a.end.After(r.end):
			r.end = a.end
		}
		r.killed = r.killed || a.killed
		r.lastFailed = a.failed
		r.refused = r.refused || a.refused
	}
	out := make([]run, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	slices.SortStableFunc(out, func(a, b run) int { return a.start.Compare(b.start) })
	return out
}

// locked reports whether sc's ticks run under the lock: in the simulated
// cluster a backend is configured, so prefer_global locks too.
func locked(sc scheduler.Schedule) bool { return sc.Hint != hints.NodeLocal }

// check returns every violation of c's run.
func (c *cluster) check() []violation {
	// The checks ask for the unique grants per tick and per grant: made
	// once per check (a hand-made ledger may change between two).
	c.ugCache = nil
	c.ugCache = c.uniqueGrants()
	defer func() { c.ugCache = nil }()
	all := runs(c.ledger.all())
	c.stats.runs = len(all)
	c.stats.dups = int(c.dupsApplied.Load())
	c.stats.netStalls = int(c.netStalls.Load())
	c.stats.freezes = c.freezeStats
	c.countStops(all)
	c.opsMu.Lock()
	c.stats.ops = c.opStats
	c.opsMu.Unlock()
	for _, g := range c.uniqueGrants() {
		c.stats.grants++
		if !g.delivered {
			c.stats.undelivered++
		}
	}
	for _, l := range c.lives {
		switch {
		case l.crashed:
			c.stats.crashes++
		case !l.endedAt.IsZero():
			c.stats.stops++
		}
	}
	var vs []violation
	vs = append(vs, c.checkTwice(all)...)
	vs = append(vs, c.checkFences()...)
	vs = append(vs, c.checkOverlap(all)...)
	vs = append(vs, c.checkLeases()...)
	vs = append(vs, c.checkPaused(all)...)
	vs = append(vs, c.checkHistory(all)...)
	vs = append(vs, c.checkLiveness(all)...)
	vs = append(vs, c.checkGrantsRun(all)...)
	vs = append(vs, c.checkManual()...)
	vs = append(vs, c.checkTicks(all)...)
	vs = append(vs, c.checkTargets(all)...)
	vs = append(vs, c.checkGroups(all)...)
	vs = append(vs, c.checkAudit()...)
	slices.SortStableFunc(vs, func(a, b violation) int { return a.at.Compare(b.at) })
	return vs
}

func (c *cluster) sched(id string) *schedPlan {
	for i := range c.plan.scheds {
		if c.plan.scheds[i].ID == id {
			return &c.plan.scheds[i]
		}
	}
	return nil
}

// checkTwice: invariant 1, and 1b: every locked run carries a fence the
// backend granted for its tick to its node.
func (c *cluster) checkTwice(all []run) []violation {
	type st struct {
		sched string
		tick  time.Time
	}
	seen := map[st][]run{}
	// By key, tick, node and fence: the first grant of each, when the
	// backend applied it. A resend answered from the grant's own lock is
	// logged again later with the same fence; invariant 1's question is
	// whether state was lost after the acquisition, not after its
	// confirmation (seed 71160: granted, reply lost, marks set back, the
	// resend confirmed the grant, the run released, and the tick, its mark
	// gone, was granted again with a higher fence: what the fence is for).
	granted := map[string]grant{}
	for _, g := range c.grants.all() {
		k := fmt.Sprint(g.key, g.tick.UnixNano(), g.node, g.fence)
		if _, ok := granted[k]; !ok {
			granted[k] = g
		}
	}
	var vs []violation
	for _, r := range all {
		if !locked(c.sched(r.sched).Schedule) {
			continue
		}
		k := st{r.sched, r.tick}
		if !r.manual && r.firstAttempt > 1 {
			// A re-run (on_node_loss = "rerun"): on the schedule's lock,
			// not a grant; its tick's run before it must be of the same run
			// id, on a life that crashed, and re-run once.
			if v, ok := c.checkRerun(r, seen[k]); ok {
				vs = append(vs, v)
			}
			seen[k] = append(seen[k], r)
			continue
		}
		if r.manual {
			// A manual run is not a scheduled tick's: a trigger's tick is
			// any time, a backfill's runs a decided tick again. Each runs
			// once by its run id (checkManual), and a backfill never
			// races its tick's regular run (checkManual).
		} else {
			for _, prev := range seen[k] {
				if v, ok := c.twice(prev, r, granted); ok {
					vs = append(vs, v)
					break
				}
			}
			seen[k] = append(seen[k], r)
		}
		if _, ok := granted[fmt.Sprint(r.sched, r.tick.UnixNano(), r.node, r.fence)]; !ok {
			vs = append(vs, violation{inv: invGrant, at: r.start, msg: fmt.Sprintf("no grant of this tick to this node with this fence: %v", r)})
		}
	}
	return vs
}

// checkRerun is invariant 1r for re-run r of a lost run, given the runs
// of its tick before it: the run it re-runs (same run id, another life)
// was lost to its node's crash (killed by it, or ended just before it
// with its record never written: history says lost, and an idempotent
// job tells by its run id), and no other re-run of it came before.
func (c *cluster) checkRerun(r run, before []run) (violation, bool) {
	sp := c.sched(r.sched)
	if !sp.rerun {
		return violation{inv: invRerun, at: r.start, msg: fmt.Sprintf("a re-run of a schedule without on_node_loss = \"rerun\": %v", r)}, true
	}
	var lost []run
	for _, p := range before {
		if p.runID == r.runID {
			lost = append(lost, p)
		}
	}
	switch {
	case len(lost) == 0:
		return violation{inv: invRerun, at: r.start, msg: fmt.Sprintf("a re-run of no run: %v", r)}, true
	case len(lost) > 1:
		return violation{inv: invRerun, at: r.start, msg: fmt.Sprintf("re-run again:\n    %v\n    %v", lost[len(lost)-1], r)}, true
	case !lost[0].killed && !c.lostToCrash(lost[0]):
		return violation{inv: invRerun, at: r.start, msg: fmt.Sprintf("a re-run of a run that was not lost:\n    %v\n    %v", lost[0], r)}, true
	}
	return violation{}, false
}

// lostToCrash reports whether run r's life crashed and history holds no
// record of r from it.
func (c *cluster) lostToCrash(r run) bool {
	c.ledger.mu.Lock()
	defer c.ledger.mu.Unlock()
	crashed := false
	for _, l := range c.lives {
		if l.node == r.node && l.life == r.life {
			crashed = l.crashed
		}
	}
	if !crashed {
		return false
	}
	for _, h := range c.history {
		if h.RunID == r.runID && h.Node == r.node && h.life == r.life {
			return false
		}
	}
	return true
}

// twice reports the violation of invariant 1 that runs a and b of one
// locked tick (a started first) make, if any.
//
// Invariant 1, in full: a locked tick runs at most once, unless the
// backend lost state between the grants of two of its runs, which physics
// forbids to guard against (a store that restarted without its data no
// longer knows the tick was claimed). The tick's mark must have been
// forgotten or set back in between (loss.go: a restart, lost marks, a
// rewind); lost locks or fence counters alone do not excuse it. Then the
// tick may run again, under a fencing token so that the job can refuse
// stale writes: the later grant's fence must be strictly above the
// earlier's. The ledger keeps what a fenced resource would (ledger.go,
// fencedStore): each job writes with its fence at its end, and the store
// refuses a write whose fence is below the latest it accepted; so with
// fences in grant order the earlier holder's writes are refused once the
// later one wrote (a write of either may also be refused for a later
// tick's, legitimately). Where no state was lost the
// invariant stays strict: one run per tick.
func (c *cluster) twice(a, b run, granted map[string]grant) (violation, bool) {
	ga, okA := granted[fmt.Sprint(a.sched, a.tick.UnixNano(), a.node, a.fence)]
	gb, okB := granted[fmt.Sprint(b.sched, b.tick.UnixNano(), b.node, b.fence)]
	msg := fmt.Sprintf("tick ran twice:\n    %v (write refused by the fenced store: %v)\n    %v (refused: %v)", a, a.refused, b, b.refused)
	if !okA || !okB || ga.token == gb.token {
		// Not two grants (1b reports a run without one), or the same
		// grant run twice: no loss of state excuses that.
		return violation{inv: invTwice, at: b.start, msg: msg}, true
	}
	if gb.at.Before(ga.at) {
		ga, gb = gb, ga
	}
	if !c.plan.lostMarks(a.sched, ga.at, gb.at) {
		return violation{inv: invTwice, at: b.start, msg: msg}, true
	}
	if gb.fence <= ga.fence {
		return violation{inv: invTwice, at: b.start, msg: fmt.Sprintf("%s\n    across a loss of the backend's state, but the later grant's fence %d is not above the earlier's %d: a fenced resource refuses the current holder",
			msg, gb.fence, ga.fence)}, true
	}
	return violation{}, false
}

// uniqueGrants drops a grant that repeats an acquisition (a resent
// try-lock-tick answered from its own lock: same token).
func (c *cluster) uniqueGrants() []grant {
	if c.ugCache != nil {
		return c.ugCache
	}
	seen := map[string]bool{}
	var out []grant
	for _, g := range c.grants.all() {
		if seen[g.token] {
			continue
		}
		seen[g.token] = true
		out = append(out, g)
	}
	return out
}

// checkFences: invariant 4. Of two grants of a key, the one whose call
// returned before the other's was issued was applied first: its fence
// must be lower. (Calls that overlapped in time are not ordered by this.)
func (c *cluster) checkFences() []violation {
	byKey := map[string][]grant{}
	for _, g := range c.uniqueGrants() {
		byKey[g.key] = append(byKey[g.key], g)
	}
	var vs []violation
	for _, gs := range byKey {
		slices.SortFunc(gs, func(a, b grant) int { return cmp.Compare(a.returned, b.returned) })
		for j, g2 := range gs {
			for _, g1 := range gs[:j] {
				if g1.returned < g2.issued && g1.fence >= g2.fence {
					vs = append(vs, violation{inv: invFence, at: g2.at, msg: fmt.Sprintf("%s: fence %d granted to %s/%d for %s after fence %d to %s/%d for %s",
						g2.key, g2.fence, g2.node, g2.life, c.at(g2.tick), g1.fence, g1.node, g1.life, c.at(g1.tick))})
					break
				}
			}
		}
	}
	return vs
}

// checkOverlap: invariant 6. Runs of a locked overlap = "skip" or "queue" schedule
// never overlap in time anywhere; of a node-local one, never on one node.
func (c *cluster) checkOverlap(all []run) []violation {
	last := map[string]run{} // by schedule (and node, for node-local)
	var vs []violation
	for _, r := range all { // in start order
		sp := c.sched(r.sched)
		if sp.Overlap == scheduler.OverlapAllow { // skip and queue hold the schedule's lock
			continue
		}
		k := r.sched
		if !locked(sp.Schedule) {
			k += "/" + r.node
		}
		if prev, ok := last[k]; ok && (prev.end.IsZero() || prev.end.After(r.start)) && !c.frozenOver(prev, r.start) && !c.overlapAfterLoss(prev, r) {
			vs = append(vs, violation{inv: invOverlap, at: r.start, msg: fmt.Sprintf("runs overlap:\n    %v\n    %v", prev, r)})
		}
		if prev, ok := last[k]; !ok || prev.end.Before(r.end) || r.end.IsZero() {
			last[k] = r
		}
	}
	return vs
}

// checkHistory: invariant 7. A run that ended is in the history, with its
// node, tick and fence, unless its node crashed before it could write it:
// a crashed life's runs are checked only when they ended a lease's length
// before the crash and its link had no trouble in between. (The record
// is written after the release, which a fault can hold up until its
// deadline; and while a call of the node waits, the pool holds back the
// ends of runs, release and record, by maxDefer of real time: any number
// of steps of the fake clock.)
func (c *cluster) checkHistory(all []run) []violation {
	c.ledger.mu.Lock()
	// By run id and the life that wrote it, as runs keys them; a run id
	// may have several records of one life (a backfilled tick stays
	// queued until Done: the same node can take it again once its first
	// run lost its lock), told apart by their fences.
	hist := map[string][]histRec{}
	for _, h := range c.history {
		k := fmt.Sprint(h.RunID, "/", h.Node, "/", h.life)
		hist[k] = append(hist[k], h)
	}
	died := map[[2]any]time.Time{}
	for _, l := range c.lives {
		if l.crashed {
			died[[2]any{l.node, l.life}] = l.diedAt
		}
	}
	c.ledger.mu.Unlock()
	var vs []violation
	for _, r := range all {
		if r.end.IsZero() || r.killed {
			continue
		}
		if d, ok := died[[2]any{r.node, r.life}]; ok && (r.end.After(d.Add(-c.maxTTL()-2*step)) || c.faulty(r.node, r.end, d)) {
			continue
		}
		hs := hist[fmt.Sprint(r.runID, "/", r.node, "/", r.life)]
		h, ok := histRec{}, len(hs) > 0
		for _, x := range hs {
			h = x
			if x.Fence == r.fence {
				break
			}
		}
		switch {
		case !ok:
			vs = append(vs, violation{inv: invHistory, at: r.end, msg: fmt.Sprintf("run not in history: %v", r)})
		case h.Node != r.node || !h.Tick.Equal(r.tick) || h.Fence != r.fence || h.Schedule != r.sched:
			vs = append(vs, violation{inv: invHistory, at: r.end, msg: fmt.Sprintf("history says %s@%s on %s fence %d; ran %v",
				h.Schedule, c.at(h.Tick), h.Node, h.Fence, r)})
		}
	}
	return vs
}

// faulty reports whether node's link had a fault window overlapping
// [from, to].
func (c *cluster) faulty(node string, from, to time.Time) bool {
	for _, n := range c.plan.nodes {
		if n.id != node {
			continue
		}
		for _, w := range n.faults {
			if w.from.Before(to) && w.to.After(from) {
				return true
			}
		}
	}
	return false
}

// maxTTL is the longest lease of any schedule.
func (c *cluster) maxTTL() time.Duration {
	var m time.Duration
	for _, sp := range c.plan.scheds {
		m = max(m, ttl(sp.Schedule))
	}
	return m
}

// ttl is the lease sc's lock is taken with (scheduler.LockTTL).
func ttl(sc scheduler.Schedule) time.Duration {
	return scheduler.LockTTL(sc.ExpectedRuntime, sc.Jitter, safetyMargin, maxSkew)
}

// checkGrantsRun: invariant 2. Every grant the backend made starts a run
// on the node it was made to, unless that node died before it could, or
// heard it and reported the tick skipped (consumed with a reason).
func (c *cluster) checkGrantsRun(all []run) []violation {
	ran := map[string]bool{}
	for _, r := range all {
		ran[fmt.Sprint(r.sched, r.tick.UnixNano(), r.node, r.fence)] = true
	}
	// A take resent with its token after its lock ended is taken again
	// under a new fence, for the same request (cluster.Store's
	// TakeRequest): the request's grant is then the later one.
	retaken := map[string]bool{}
	// A tick's grant whose reply was lost is heard when a resend is
	// answered granted from it (the same token): the node then knows of
	// it, as of a grant heard at once.
	heard := map[string]bool{}
	for _, g := range c.grants.all() {
		if g.manual && g.delivered {
			retaken[g.token] = true
		}
		if !g.manual && !g.dup && g.delivered {
			heard[g.token] = true
		}
	}
	// A trigger whose take was never heard back goes back to its queue
	// once the take's lock is free (no renewal or release came from its
	// taker), and a later take runs it.
	ranRequest := map[string]bool{}
	for _, r := range all {
		if r.manual {
			ranRequest[r.runID] = true
		}
	}
	var vs []violation
	for _, g := range c.uniqueGrants() {
		if ran[fmt.Sprint(g.key, g.tick.UnixNano(), g.node, g.fence)] {
			continue
		}
		if g.manual && !g.delivered && retaken[g.token] {
			continue // its resend was answered: checked as that grant
		}
		if g.manual && !g.delivered && !g.backfill && ranRequest[g.runID] {
			continue // requeued, and run from a later take: checkManual checks it ran once
		}
		c.opsMu.Lock()
		refusedLater := c.refusedReq[g.runID]
		c.opsMu.Unlock()
		if g.manual && !g.delivered && !g.backfill && refusedLater {
			continue // requeued, and a later take of it refused: the refusal is its end (logged)
		}
		if g.manual && !g.delivered && !g.backfill && c.queuedAtEnd(g.key, g.runID) {
			// Back on its queue when the run ended (its take never heard
			// back, its lock lapsed): not lost, not run yet, as a trigger
			// asked near the end with its node's link broken (seed 239125:
			// requeued after the span, its node stopped by then).
			continue
		}
		if g.manual && (c.refusedTake(g.token) || (!g.delivered && g.backfill)) {
			// Refused by the scheduler and released; or a backfill's take
			// whose reply was lost: the request stays queued until Done,
			// and the next poll takes it once the lock expired.
			continue
		}
		// A node that crashed or stopped with the grant in hand writes
		// nothing of it. With the reply lost, the grant is in its hands
		// for as long as it resends (locking.GrantKeep: twice the TTL on
		// the memory backend) and its last resend waits for an answer,
		// not one TTL (seed 201230: reply lost, resent at +4s, crashed at
		// +5s, TTL 4s; 217034: the last resend, sent just before the keep
		// ended, lost, the node crashed waiting for it). That answer
		// comes when its batch's does: a batch of try-lock-ticks waits
		// for the latest deadline among its requests (scheduler's
		// batchContext), another schedule's TTL (a first attempt) or the
		// keep of another's resends, each request then given its own
		// context's error (seeds 477050, 493444: the last resend of a 4s
		// and a 5s TTL in a batch with a 13s and an 11s one, the node
		// crashed 12.048s and 19.7s after the grant, still waiting).
		hold := g.ttl
		if !g.delivered {
			hold = locking.GrantKeep(g.ttl, 0) + locking.GrantKeep(max(g.ttl, c.maxTTL()), 0)
		}
		// Or before the grant: a request its node sent before it crashed,
		// held in a hang or a stall, can be applied after the crash, and
		// nobody is left to run what it took (seed 433806: crashed at
		// +67.527s in a hang window, its catch-up try granted at +69s).
		if c.lifeEndedWithin(g.node, g.life, c.plan.start, g.at.Add(hold)) {
			continue
		}
		if g.manual && g.delivered && c.leases.renewingAtCrash(g.token) &&
			(ranRequest[g.runID] || refusedLater || c.queuedAtEnd(g.key, g.runID) || c.leases.everRenewed(g.token)) {
			// A manual run's take heard, and its node crashed while the
			// renewal that confirms it (scheduler's confirmTake: the run
			// starts only once it answered) was still under way: hung in
			// a client that does not watch its deadline, or stalled
			// (seeds 381272, 398750, 289678, 282755: crashed in a hang
			// window, up to 11s after the take). The node died holding
			// the grant, as within a TTL above; what the renewal does not
			// confirm, its request is not lost with: a backfill stays
			// queued until Done, a trigger unheard goes back to its queue
			// and runs from a later take (or is queued at the end). A
			// renewal applied but never answered made the trigger its
			// taker's, lost with it, at most once (cluster.Store's
			// TakeRequest).
			continue
		}
		if !g.delivered && c.plan.lostLocks(g.at, g.at.Add(2*g.ttl)) {
			// The backend lost the grant with its lock before the resend
			// that would have found it (loss.go): the resend is decided
			// anew, as the store can no longer tell it was granted.
			continue
		}
		c.ledger.mu.Lock()
		_, skipped := c.skips[skipKey{g.node, g.life, g.key, g.tick.UnixNano()}]
		recorded, recordedFence, recordedUnknown := false, false, false
		for _, h := range c.history {
			if h.Node == g.node && h.life == g.life && h.Schedule == g.key && h.Tick.Equal(g.tick) {
				recorded = true
				recordedFence = recordedFence || h.Fence == g.fence
				recordedUnknown = recordedUnknown || errors.Is(h.Err, scheduler.ErrGrantUnknown)
			}
		}
		c.ledger.mu.Unlock()
		if (g.delivered || heard[g.token]) && (skipped || recorded) {
			// Heard (at once, or through a resend) and given up with a
			// reason (its lease ran out in the jitter, or before the
			// answer came): consumed, as the contract allows. A grant whose reply was lost is skipped
			// too, but for want of the answer: that is the loss this
			// invariant is about.
			continue
		}
		if recordedFence || (!g.delivered && recordedUnknown) {
			// Its reply lost, but a resend learnt of it from the backend's
			// grant record (granted again too late to run, or expired) and
			// the node recorded it as not run with its fence; or no resend
			// was answered before the resends ended, and the node recorded
			// the tick as not run, its grant unknown.
			continue
		}
		v := violation{inv: invLost, at: g.at, msg: fmt.Sprintf("grant of %s@%s to %s/%d fence %d (reply delivered %v) started no run",
			g.key, c.at(g.tick), g.node, g.life, g.fence, g.delivered)}
		switch {
		case g.dup:
			// A late copy of a resent request's first attempt granted a
			// tick to a node that moved on: no hole since the backends
			// record a resend's verdict (link_dup.go); a violation.
		case g.manual && !g.delivered:
			// A trigger's take never heard back whose trigger never ran,
			// though it goes back to its queue once the lock is free: a
			// violation.
		}
		vs = append(vs, v)
	}
	return vs
}

// lifeEndedWithin reports whether node's life ended (crash or stop)
// between from and to.
func (c *cluster) lifeEndedWithin(node string, life int, from, to time.Time) bool {
	for _, n := range c.plan.nodes {
		if n.id == node && life < len(n.lives) {
			e := n.lives[life].to
			return e.Before(c.plan.start.Add(c.plan.span)) && !e.Before(from) && !e.After(to)
		}
	}
	return false
}

// leaseLen is the part of a lock's TTL its holder may trust (scheduler's
// lease.go: the TTL less the safety margin, at least a quarter of it).
func leaseLen(ttl time.Duration) time.Duration {
	if n := ttl - safetyMargin; n >= ttl/4 {
		return n
	}
	return ttl / 4
}

// checkLeases: invariant 5. A locked attempt starts before its lease
// deadline (the last acquisition or renewal whose answer the node heard,
// as sent, plus leaseLen) and ends by it, give or take the kill grace of
// the simulation: one step, since a job that was cancelled on time tells
// the ledger at the next point the clock stops at.
func (c *cluster) checkLeases() []violation {
	tokens := map[string]grant{}
	for _, g := range c.uniqueGrants() {
		tokens[fmt.Sprint(g.key, g.tick.UnixNano(), g.node, g.life, g.fence)] = g
	}
	var vs []violation
	for _, a := range c.ledger.all() {
		if a.fence == 0 || a.killed || a.end.IsZero() {
			continue
		}
		g, ok := tokens[fmt.Sprint(a.sched, a.tick.UnixNano(), a.node, a.life, a.fence)]
		if !ok {
			continue // invariant 1b's to report
		}
		n := leaseLen(g.ttl)
		if last, ok := c.leases.lastBefore(g.token, a.start); !ok || !a.start.Before(last.Add(n+step)) {
			vs = append(vs, violation{inv: invLease, at: a.start, msg: fmt.Sprintf("attempt started past its lease (last heard send %s, lease %v): %v",
				c.at(last), n, &a)})
			continue
		}
		if last, _ := c.leases.lastBefore(g.token, a.end); a.end.After(last.Add(n+c.endLag(a.sched))) && !c.frozenPast(a, last.Add(n)) {
			v := violation{inv: invLease, at: a.end, msg: fmt.Sprintf("attempt ran past its lease deadline %s (last heard send %s, lease %v): %v",
				c.at(last.Add(n)), c.at(last), n, &a)}
			vs = append(vs, v)
		}
	}
	return vs
}

// checkPaused: invariant 6b. While a schedule is paused, the backend
// grants none of its ticks (the pause is read inside try-lock-tick), and
// no node starts a node-local run of it (it reads the flag at the tick).
// A locked run may still start after the pause, on a grant made before.
func (c *cluster) checkPaused(all []run) []violation {
	var vs []violation
	for _, w := range c.plan.pauses {
		for _, g := range c.uniqueGrants() {
			// A manual run's take does not read the pause flag: an
			// operator's trigger runs a paused schedule.
			if !g.manual && g.key == w.sched && g.at.After(w.from) && g.at.Before(w.to) {
				vs = append(vs, violation{inv: invPaused, at: g.at, msg: fmt.Sprintf("%s@%s granted to %s/%d while paused (%s..%s)",
					g.key, c.at(g.tick), g.node, g.life, c.at(w.from), c.at(w.to))})
			}
		}
		if locked(c.sched(w.sched).Schedule) {
			continue
		}
		for _, r := range all {
			// A pause's own end time is read on the node's clock: it
			// ends that much earlier on a node whose clock runs ahead.
			to := w.to
			if off := c.offset(r.node, r.life); w.until && off > 0 {
				to = to.Add(-off)
			}
			if r.sched == w.sched && r.start.After(w.from) && r.start.Before(to) {
				vs = append(vs, violation{inv: invPaused, at: r.start, msg: fmt.Sprintf("node-local run started while paused (%s..%s): %v",
					c.at(w.from), c.at(w.to), r)})
			}
		}
	}
	return vs
}

// offset is the clock offset of node's life.
func (c *cluster) offset(node string, life int) time.Duration {
	for _, n := range c.plan.nodes {
		if n.id == node && life < len(n.lives) {
			return n.lives[life].offset
		}
	}
	return 0
}
