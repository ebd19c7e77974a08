package sim

import (
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The checks of the operators' actions (check_ops.go), on ledgers made by
// hand.

// ranManual records a manual run (request id) of tick (milliseconds from
// t0) on node, with its take's grant, its lease and its history record.
func (c *cluster) ranManual(node, id string, tickMs int, fence int64, backfill bool) {
	tk := t0.Add(time.Duration(tickMs) * time.Millisecond)
	seq := c.seq.Add(2)
	tok := "manual-" + id + "-" + node
	c.grants.add(grant{node: node, key: "s0", tick: tk, fence: fence, token: tok, ttl: 8 * time.Second,
		at: tk, issued: seq - 1, returned: seq, delivered: true, manual: true, backfill: backfill, runID: id})
	c.leases.heard(tok, tk)
	c.ledger.atts = append(c.ledger.atts, &attempt{sched: "s0", tick: tk, node: node, runID: id,
		attempt: 1, fence: fence, manual: true, start: tk, end: tk.Add(100 * time.Millisecond)})
	c.history = append(c.history, histRec{RunRecord: scheduler.RunRecord{Schedule: "s0", Tick: tk,
		Node: node, Fence: fence, RunID: id, Manual: true}})
}

func TestCheckManualRunIsNotItsTicksRun(t *testing.T) {
	c := handMade(scheduler.OverlapAllow)
	c.everyTick(-1)
	// A trigger accepted on the second of tick 10, and a backfill of tick
	// 6 (decided long before): neither runs a tick twice.
	c.ranManual("node-0", "trigger-0", 10_000, 200, false)
	c.markRead = map[string]markRead{"node-0/s0": {seq: c.seq.Add(1), at: t0.Add(12 * time.Second)}}
	c.backfills = append(c.backfills, acceptedBackfill{node: "node-0", sched: "s0", tick: t0.Add(6 * time.Second),
		read: c.markRead["node-0/s0"], fence: 201, at: t0.Add(12 * time.Second)})
	c.ranManual("node-0", "backfill-0", 6_000, 201, true)
	if vs := c.check(); len(vs) != 0 {
		t.Fatalf("violations: %+v", vs)
	}
}

func TestCheckFindsManualRequestRunTwice(t *testing.T) {
	c := handMade(scheduler.OverlapAllow)
	c.everyTick(-1)
	c.ranManual("node-0", "trigger-0", 10_500, 200, false)
	c.ranManual("node-1", "trigger-0", 11_500, 201, false)
	wantOnly(t, c.check(), invTwice)
}

func TestCheckFindsBackfillRacingItsTick(t *testing.T) {
	c := handMade(scheduler.OverlapAllow)
	c.everyTick(20)
	// The backfill of tick 20 was accepted on a mark read before tick 20's
	// regular grant: the tick was not decided, and runs twice.
	c.markRead = map[string]markRead{"node-0/s0": {seq: c.seq.Add(1), at: t0.Add(19 * time.Second)}}
	c.backfills = append(c.backfills, acceptedBackfill{node: "node-0", sched: "s0", tick: t0.Add(20 * time.Second),
		read: c.markRead["node-0/s0"], fence: 200, at: t0.Add(19 * time.Second)})
	c.ranManual("node-0", "backfill-0", 20_000, 200, true)
	c.ran(20, time.Second, 300)
	wantOnly(t, c.check(), invBackfill)
}

// A backfill accepted on a mark that decided its tick, then the backend
// forgot or set back that mark, and the tick's regular run was granted
// again (seeds 4633, 7007, 11965, 30273): invariant 1's rule for a loss of
// state, a second run under a higher fence, and only across a loss of
// this key's mark after the read.
func TestCheckBackfillAcrossLostMark(t *testing.T) {
	for _, tc := range []struct {
		name  string
		loss  stateLoss
		fence int64
		want  bool // a violation of 1c
	}{
		{"mark set back, higher fence", stateLoss{kind: lossRewind, at: t0.Add(14500 * time.Millisecond), back: 10 * time.Second}, 300, false},
		{"restart, higher fence", stateLoss{kind: lossRestart, at: t0.Add(14500 * time.Millisecond)}, 300, false},
		{"mark set back, lower fence", stateLoss{kind: lossRewind, at: t0.Add(14500 * time.Millisecond), back: 10 * time.Second}, 100, true},
		{"another key's mark forgotten", stateLoss{kind: lossMarks, at: t0.Add(14500 * time.Millisecond), keys: []string{"s9"}}, 300, true},
		{"fence counters only", stateLoss{kind: lossFences, at: t0.Add(14500 * time.Millisecond)}, 300, true},
		{"mark lost before the read", stateLoss{kind: lossMarks, at: t0.Add(11500 * time.Millisecond)}, 300, true},
		{"mark lost after the regular grant", stateLoss{kind: lossMarks, at: t0.Add(16500 * time.Millisecond)}, 300, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := handMade(scheduler.OverlapAllow)
			c.everyTick(-1)
			c.plan.losses = []stateLoss{tc.loss}
			// Tick 6 ran; its backfill was taken at 12s (fence 200) and
			// accepted on a mark read then; tick 6 granted again at 16s.
			c.ranManual("node-0", "backfill-0", 6_000, 200, true)
			c.grants.gs[len(c.grants.gs)-1].at = t0.Add(12 * time.Second)
			c.markRead = map[string]markRead{"node-0/s0": {seq: c.seq.Add(1), at: t0.Add(12 * time.Second)}}
			c.backfills = append(c.backfills, acceptedBackfill{node: "node-0", sched: "s0", tick: t0.Add(6 * time.Second),
				read: c.markRead["node-0/s0"], fence: 200, at: t0.Add(12 * time.Second)})
			c.ran(6, time.Second, tc.fence)
			c.grants.gs[len(c.grants.gs)-1].at = t0.Add(16 * time.Second)
			got := false
			for _, v := range c.check() {
				got = got || v.inv == invBackfill
			}
			if got != tc.want {
				t.Errorf("violation of %q: %v, want %v", invBackfill, got, tc.want)
			}
		})
	}
}

func TestCheckFindsLostTriggerTake(t *testing.T) {
	c := handMade(scheduler.OverlapAllow)
	c.everyTick(-1)
	seq := c.seq.Add(2)
	c.grants.add(grant{node: "node-0", key: "s0", tick: t0.Add(15500 * time.Millisecond), fence: 300, token: "lost",
		ttl: 8 * time.Second, at: t0.Add(15500 * time.Millisecond), issued: seq - 1, returned: seq, manual: true})
	vs := c.check()
	wantOnly(t, vs, invLost)
	if vs[0].known != "" {
		t.Fatalf("a lost trigger take that never ran is reported as the known hole %q, want a violation", vs[0].known)
	}
	// Refused by the scheduler (and released): no run is owed.
	c.refused = map[string]bool{"lost": true}
	if vs := c.check(); len(vs) != 0 {
		t.Fatalf("violations once the take was refused: %+v", vs)
	}
}

// A trigger whose take was never heard back goes back to its queue once
// the lock is free, and a later take (another node's, another token) runs
// it: the lost take owes no run of its own.
func TestCheckLostTriggerTakeRequeued(t *testing.T) {
	c := handMade(scheduler.OverlapAllow)
	c.everyTick(-1)
	seq := c.seq.Add(2)
	c.grants.add(grant{node: "node-0", key: "s0", tick: t0.Add(15500 * time.Millisecond), fence: 300, token: "lost",
		ttl: 8 * time.Second, at: t0.Add(15500 * time.Millisecond), issued: seq - 1, returned: seq, manual: true, runID: "trigger-0"})
	wantOnly(t, c.check(), invLost)
	c.ranManual("node-1", "trigger-0", 25_000, 301, false)
	if vs := c.check(); len(vs) != 0 {
		t.Fatalf("violations once the requeued trigger ran from a later take: %+v", vs)
	}
}

func TestCheckLivenessFollowsReload(t *testing.T) {
	c := handMade(scheduler.OverlapSkip)
	for tick := 2; tick <= 12; tick += 2 { // the old spec's ticks, until the reload
		c.ran(tick, time.Second, int64(tick))
	}
	c.plan.ops = []opAction{{kind: opReload, sched: "s0", at: t0.Add(14 * time.Second), cron: "*/3 * * * * *", period: 3 * time.Second}}
	vs := c.check()
	// The new spec's tick 24 (past the reload's margin) never ran; the
	// old spec's 16..26 are not owed.
	wantOnly(t, vs, invLiveness)
	if len(vs) != 1 || !vs[0].at.Equal(t0.Add(24*time.Second)) {
		t.Fatalf("violations %+v, want one, of tick +24s", vs)
	}
	c.ran(24, time.Second, 24)
	if vs := c.check(); len(vs) != 0 {
		t.Fatalf("violations with the new spec's tick run: %+v", vs)
	}
}

func TestCheckLivenessExcusesTickHeldByManualRun(t *testing.T) {
	c := handMade(scheduler.OverlapSkip)
	c.everyTick(14)
	c.ranManual("node-0", "trigger-0", 13_500, 100, false)
	if vs := c.check(); len(vs) != 0 {
		t.Fatalf("a tick whose lock a trigger held is owed: %+v", vs)
	}
}

// A copy's grant that started no run is a violation routed to no known
// hole, whether the original's answer was heard or not: the backends answer
// a late copy of a resent try-lock-tick as its resend was (link_dup.go).
func TestCheckFindsDuplicatedGrants(t *testing.T) {
	for _, heard := range []bool{true, false} {
		c := handMade(scheduler.OverlapAllow)
		c.everyTick(-1)
		seq := c.seq.Add(2)
		c.grants.add(grant{node: "node-0", key: "s0", tick: t0.Add(29 * time.Second), fence: 300, token: "copy",
			ttl: 8 * time.Second, at: t0.Add(29 * time.Second), issued: seq - 1, returned: seq, dup: true, origHeard: heard})
		vs := c.check()
		wantOnly(t, vs, invLost)
		if vs[0].known != "" {
			t.Errorf("a copy's grant (original heard %v) is routed to known hole %q, want none", heard, vs[0].known)
		}
	}
}

func TestCheckFindsRunOfNoTick(t *testing.T) {
	c := handMade(scheduler.OverlapSkip)
	c.everyTick(-1)
	c.ledger.atts[4].tick = c.ledger.atts[4].tick.Add(time.Second) // tick 10 ran as 11: no tick of */2
	c.history[4].Tick = c.ledger.atts[4].tick
	c.grants.gs[4].tick = c.ledger.atts[4].tick
	vs := c.check()
	found := false
	for _, v := range vs {
		found = found || v.inv == invSpec
	}
	if !found {
		t.Fatalf("no %q in %+v", invSpec, vs)
	}
}

func TestCheckTicksFollowZoneAndSpread(t *testing.T) {
	c := handMade(scheduler.OverlapSkip)
	sp := &c.plan.scheds[0]
	sp.CronExpr, sp.Location, sp.period = "*/10 * 1,3 * * *", dstZone, 10*time.Second
	// 2026-11-01 01:59:50 EDT, then 01:00:00 EST: hour 1 repeated, which
	// the spec fires in once, at its first occurrence.
	first := time.Date(2026, 11, 1, 5, 59, 50, 0, time.UTC)
	c.ledger.atts = []*attempt{{sched: "s0", tick: first, node: "node-0", runID: "a", attempt: 1, start: first, end: first}}
	if vs := c.checkTicks(runs(c.ledger.all())); len(vs) != 0 {
		t.Fatalf("01:59:50 EDT is a tick: %+v", vs)
	}
	again := first.Add(10 * time.Second) // 01:00:00 EST
	c.ledger.atts = append(c.ledger.atts, &attempt{sched: "s0", tick: again, node: "node-0", runID: "b", attempt: 1, start: again, end: again})
	if vs := c.checkTicks(runs(c.ledger.all())); len(vs) != 1 {
		t.Fatalf("01:00:00 EST, the repeated hour, ran: want one violation, got %+v", vs)
	}
	// With a spread of 9s, s0's ticks move by its offset.
	sp.Location, sp.CronExpr, sp.Spread = nil, "*/10 * * * * *", 9*time.Second
	off := cronspec.SpreadOffset("s0", sp.Spread)
	tk := t0.Add(10*time.Second + off)
	c.ledger.atts = []*attempt{{sched: "s0", tick: tk, node: "node-0", runID: "c", attempt: 1, start: tk, end: tk}}
	if vs := c.checkTicks(runs(c.ledger.all())); len(vs) != 0 {
		t.Fatalf("+10s plus the offset %v is a tick: %+v", off, vs)
	}
	if off != 0 {
		c.ledger.atts[0].tick = t0.Add(10 * time.Second)
		if vs := c.checkTicks(runs(c.ledger.all())); len(vs) != 1 {
			t.Fatalf("+10s without the offset %v ran: want one violation, got %+v", off, vs)
		}
	}
}

// Runs that overlap across a loss of the locks are excused when the one
// granted after the loss has the higher fence, whichever started first.
func TestCheckOverlapAcrossLossFollowsGrantOrder(t *testing.T) {
	for _, tc := range []struct {
		fence int64 // of the run granted after the loss
		want  bool  // an overlap is reported
	}{{100, false}, {5, true}} {
		c := handMade(scheduler.OverlapSkip)
		c.plan.losses = []stateLoss{{kind: lossRestart, at: t0.Add(10500 * time.Millisecond)}}
		// Tick 10, granted at +10 (fence 10), waits out a jitter: runs +12..+14.
		c.ran(10, 2*time.Second, 10)
		c.ledger.atts[0].start = t0.Add(12 * time.Second)
		c.ledger.atts[0].end = t0.Add(14 * time.Second)
		// A trigger taken at +11, after the restart: runs +11..+13.
		c.ranManual("node-0", "trigger-0", 11_000, tc.fence, false)
		c.ledger.atts[1].end = t0.Add(13 * time.Second)
		found := false
		for _, v := range c.checkOverlap(runs(c.ledger.all())) {
			found = found || v.inv == invOverlap
		}
		if found != tc.want {
			t.Errorf("later grant's fence %d: overlap reported %v, want %v", tc.fence, found, tc.want)
		}
	}
}

// A trigger's take heard, and its node crashed while the renewal that
// confirms it hung (seeds 381272, 398750, 289678, 282755: a client that
// does not watch its deadline, the crash up to 11s after the take, past
// one TTL): the node died holding the grant, which owes no run of its
// own as long as its request is not lost with it: the trigger, unheard,
// went back to its queue and ran from a later take (or is queued at the
// end, or its confirming renewal was applied, making it the dead taker's).
func TestCheckTakeWhoseNodeCrashedConfirmingIt(t *testing.T) {
	take := func(c *cluster, crashedRenewing bool) {
		c.plan.nodes[0].lives[0].to = t0.Add(25 * time.Second) // crashed, 9.5s after the take
		seq := c.seq.Add(2)
		c.grants.add(grant{node: "node-0", key: "s0", tick: t0.Add(15500 * time.Millisecond), fence: 300, token: "take",
			ttl: 3 * time.Second, at: t0.Add(15500 * time.Millisecond), issued: seq - 1, returned: seq, delivered: true,
			manual: true, runID: "trigger-0"})
		if crashedRenewing {
			c.leases.diedRenewing("take")
		}
	}
	t.Run("requeued and run", func(t *testing.T) {
		c := handMade(scheduler.OverlapAllow)
		c.everyTick(-1)
		take(c, true)
		wantOnly(t, c.check(), invLost) // never run anywhere: lost
		c.ranManual("node-1", "trigger-0", 27_000, 301, false)
		if vs := c.check(); len(vs) != 0 {
			t.Fatalf("violations once the requeued trigger ran from a later take: %+v", vs)
		}
	})
	t.Run("its confirmation applied", func(t *testing.T) {
		c := handMade(scheduler.OverlapAllow)
		c.everyTick(-1)
		take(c, true)
		c.leases.applied("take")
		if vs := c.check(); len(vs) != 0 {
			t.Fatalf("violations for a trigger confirmed, its taker dead before the answer: %+v", vs)
		}
	})
	t.Run("not confirming at the crash", func(t *testing.T) {
		c := handMade(scheduler.OverlapAllow)
		c.everyTick(-1)
		take(c, false) // heard, no renewal under way: it should have run or been recorded
		c.ranManual("node-1", "trigger-0", 27_000, 301, false)
		wantOnly(t, c.check(), invLost)
	})
	t.Run("the retake's confirmation lost", func(t *testing.T) {
		// Seed 282755: the trigger went back to its queue, and the next
		// take's confirming renewal was applied, its reply lost, its run
		// never started. The node gives such a take back now
		// (Manual.GiveBack): a trigger still lost this way is a violation,
		// no longer a known hole.
		c := handMade(scheduler.OverlapAllow)
		c.everyTick(-1)
		take(c, true)
		seq := c.seq.Add(2)
		c.grants.add(grant{node: "node-1", key: "s0", tick: t0.Add(20 * time.Second), fence: 301, token: "retake",
			ttl: 3 * time.Second, at: t0.Add(20 * time.Second), issued: seq - 1, returned: seq, delivered: true,
			manual: true, runID: "trigger-0"})
		c.leases.applied("retake")
		c.history = append(c.history, histRec{RunRecord: scheduler.RunRecord{Schedule: "s0", Tick: t0.Add(20 * time.Second),
			Node: "node-1", Fence: 301, RunID: "trigger-0", Manual: true, Result: scheduler.ResultLockLost}})
		vs := c.check()
		wantOnly(t, vs, invLost)
		if len(vs) != 1 || vs[0].known != "" {
			t.Fatalf("violations %+v, want one, of no known hole", vs)
		}
	})
}

// A backfilled tick stays at the head of its queue until Done: a node
// that loses its lease mid-backfill (frozen, seed 193) leaves it to
// another take, which runs it again under a higher fence. A run from a
// take after the Done, or twice from one take, is a second run.
func TestCheckBackfillRetakenBeforeItsDone(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fence    int64
		doneSeq  func(retake uint64) uint64 // 0: never done
		violates bool
	}{
		{"retaken, never done", 201, func(uint64) uint64 { return 0 }, false},
		{"retaken before its done", 201, func(r uint64) uint64 { return r + 1 }, false},
		{"taken again after its done", 201, func(r uint64) uint64 { return r - 1 }, true},
		{"the same take run twice", 200, func(uint64) uint64 { return 0 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := handMade(scheduler.OverlapAllow)
			c.everyTick(-1)
			c.markRead = map[string]markRead{"node-0/s0": {seq: c.seq.Add(1), at: t0.Add(12 * time.Second)}}
			c.backfills = append(c.backfills, acceptedBackfill{node: "node-0", sched: "s0", tick: t0.Add(6 * time.Second),
				read: c.markRead["node-0/s0"], fence: 200, at: t0.Add(12 * time.Second)})
			c.ranManual("node-0", "backfill-0", 6_000, 200, true)
			c.ranManual("node-1", "backfill-0", 6_000, tc.fence, true)
			retake := c.grants.gs[len(c.grants.gs)-1].issued
			if d := tc.doneSeq(retake); d != 0 {
				c.doneSeq = map[string]uint64{"backfill-0": d}
			}
			got := false
			for _, v := range c.check() {
				got = got || v.inv == invTwice
			}
			if got != tc.violates {
				t.Errorf("violation of %q: %v, want %v", invTwice, got, tc.violates)
			}
		})
	}
}

// A backfilled tick stays queued until Done, so the node that ran it can
// take it again (its first run lost its lock): two runs of one run id on
// one life, told apart by their fences, each with its record (seeds
// 440914, 432504 and 17 more of the release run: the checker kept one
// record per run id and life, and called the other run's record wrong).
func TestCheckHistoryTwoRunsOfOneBackfillOnOneLife(t *testing.T) {
	c := handMade(scheduler.OverlapAllow)
	c.everyTick(-1)
	c.ranManual("node-0", "bf-0", 4_000, 201, true)
	c.ranManual("node-0", "bf-0", 4_000, 202, true)
	for _, v := range c.check() {
		if v.inv == invHistory {
			t.Errorf("%s: %s", v.inv, v.msg)
		}
	}
}

// A grant applied after its node crashed (the request held in a hang or
// a stall, applied once the node was gone) has nobody to run it: the node
// died holding it, as one that crashed just after (seed 433806: crashed
// at +67.527s in a hang window, its catch-up try granted at +69s). A grant
// to a live node that started nothing is still a violation.
func TestCheckGrantAppliedAfterItsNodeCrashed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		crash    time.Duration // the life's end, from t0; 30s: none in the span
		violates bool
	}{
		{"crashed before the grant", 10 * time.Second, false},
		{"alive", 30 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := handMade(scheduler.OverlapAllow)
			c.plan.nodes[0].lives[0].to = t0.Add(tc.crash)
			seq := c.seq.Add(2)
			c.grants.add(grant{node: "node-0", key: "s0", tick: t0.Add(11 * time.Second), fence: 9, token: "late",
				ttl: 3 * time.Second, at: t0.Add(12 * time.Second), issued: seq - 1, returned: seq, delivered: true})
			lost := false
			for _, v := range c.check() {
				lost = lost || v.inv == invLost
			}
			if lost != tc.violates {
				t.Fatalf("invariant 2 violated: %v, want %v", lost, tc.violates)
			}
		})
	}
}
