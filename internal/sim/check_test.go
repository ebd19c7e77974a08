package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The checks themselves, on ledgers made by hand: each invariant's check
// must find the violation it is about, and nothing in a clean ledger, or
// a green TestSim would prove nothing.

var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// handMade is a cluster that never ran: one node alive throughout, one
// every-2s require_global schedule, and whatever the test adds.
func handMade(overlap scheduler.Overlap) *cluster {
	sp := schedPlan{period: 2 * time.Second, Schedule: scheduler.Schedule{ID: "s0", CronExpr: "*/2 * * * * *",
		Hint: hints.RequireGlobal, Overlap: overlap, ExpectedRuntime: time.Second}}
	p := &plan{start: t0, span: 30 * time.Second, scheds: []schedPlan{sp},
		nodes: []nodePlan{{id: "node-0", lives: []life{{from: t0, to: t0.Add(30 * time.Second)}}}}}
	c := &cluster{plan: p, skips: map[skipKey]scheduler.SkipReason{}}
	c.lives = []*lifeState{{node: "node-0", startedAt: t0}}
	return c
}

// ran records a clean run of tick (seconds from t0) lasting d, with its
// grant, its lease and its history record.
func (c *cluster) ran(tick int, d time.Duration, fence int64) {
	tk := t0.Add(time.Duration(tick) * time.Second)
	id := fmt.Sprintf("run-%d-%d", tick, fence)
	seq := c.seq.Add(2)
	tok := fmt.Sprint("token-", fence)
	c.grants.add(grant{node: "node-0", key: "s0", tick: tk, fence: fence, token: tok, ttl: 8 * time.Second,
		at: tk, issued: seq - 1, returned: seq, delivered: true})
	c.leases.heard(tok, tk)
	c.ledger.atts = append(c.ledger.atts, &attempt{sched: "s0", tick: tk, node: "node-0", runID: id,
		attempt: 1, fence: fence, start: tk, end: tk.Add(d)})
	c.history = append(c.history, histRec{RunRecord: scheduler.RunRecord{Schedule: "s0", Tick: tk,
		Node: "node-0", Fence: fence, RunID: id}})
}

// everyTick runs every tick of the span but skip.
func (c *cluster) everyTick(skip int) {
	for tick := 2; tick < 30; tick += 2 {
		if tick != skip {
			c.ran(tick, time.Second, int64(tick))
		}
	}
}

func wantOnly(t *testing.T, vs []violation, inv string) {
	t.Helper()
	if len(vs) == 0 {
		t.Fatalf("no violation found, want %q", inv)
	}
	for _, v := range vs {
		if v.inv != inv {
			t.Errorf("found %q (%s), want only %q", v.inv, v.msg, inv)
		}
	}
}

func TestCheckCleanLedger(t *testing.T) {
	c := handMade(scheduler.OverlapSkip)
	c.everyTick(-1)
	if vs := c.check(); len(vs) != 0 {
		t.Fatalf("violations in a clean ledger: %+v", vs)
	}
	if c.stats.checkedTicks == 0 {
		t.Fatal("no tick checked for liveness")
	}
}

func TestCheckFindsTickRunTwice(t *testing.T) {
	c := handMade(scheduler.OverlapAllow)
	c.everyTick(-1)
	c.ran(10, time.Second, 100) // tick 10 again, on a grant of its own
	wantOnly(t, c.check(), invTwice)
}

func TestCheckFindsLostTick(t *testing.T) {
	c := handMade(scheduler.OverlapSkip)
	c.everyTick(14)
	wantOnly(t, c.check(), invLiveness)
}

func TestCheckFindsFenceGoingBack(t *testing.T) {
	c := handMade(scheduler.OverlapSkip)
	c.everyTick(-1)
	c.ledger.atts[5].fence = 3 // tick 12 ran with a fence below tick 10's
	c.history[5].Fence = 3
	c.grants.gs[5].fence = 3
	wantOnly(t, c.check(), invFence)
}

func TestCheckFindsOverlap(t *testing.T) {
	c := handMade(scheduler.OverlapSkip)
	c.everyTick(-1)
	c.ledger.atts[3].end = c.ledger.atts[3].start.Add(3 * time.Second) // tick 8 runs into tick 10's run
	wantOnly(t, c.check(), invOverlap)
}

func TestCheckFindsRunMissingFromHistory(t *testing.T) {
	c := handMade(scheduler.OverlapSkip)
	c.everyTick(-1)
	c.history = c.history[1:]
	wantOnly(t, c.check(), invHistory)
}

func TestCheckFindsGrantThatRanNowhere(t *testing.T) {
	c := handMade(scheduler.OverlapSkip)
	c.everyTick(-1)
	seq := c.seq.Add(2)
	c.grants.add(grant{node: "node-0", key: "s0", tick: t0.Add(31 * time.Second), fence: 40, token: "t40",
		ttl: 8 * time.Second, at: t0.Add(29 * time.Second), issued: seq - 1, returned: seq, delivered: true})
	wantOnly(t, c.check(), invLost)
}

func TestCheckFindsRunPastItsLease(t *testing.T) {
	c := handMade(scheduler.OverlapSkip)
	c.ran(2, 20*time.Second, 2) // a lease of 6s, never renewed
	vs := c.check()
	found := false
	for _, v := range vs {
		found = found || v.inv == invLease
	}
	if !found {
		t.Fatalf("no %q in %+v", invLease, vs)
	}
}

func TestCheckFindsGrantWhilePaused(t *testing.T) {
	c := handMade(scheduler.OverlapSkip)
	c.everyTick(-1)
	c.plan.pauses = []pauseWindow{{sched: "s0", from: t0.Add(9 * time.Second), to: t0.Add(15 * time.Second)}}
	wantOnly(t, c.check(), invPaused)
}

// rerun runs tick 10 again, on a grant of its own made at 12s with fence.
func (c *cluster) rerun(fence int64) {
	c.ran(10, time.Second, fence)
	c.grants.gs[len(c.grants.gs)-1].at = t0.Add(12 * time.Second)
}

// A tick may run again across a loss of its mark, under a higher fence
// only; a loss of locks or fence counters alone excuses nothing.
func TestCheckTickTwiceAcrossLostState(t *testing.T) {
	has := func(vs []violation, inv string) bool {
		for _, v := range vs {
			if v.inv == inv {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		name  string
		loss  stateLoss
		fence int64
		twice bool
		// confirmed: the first grant is logged again after the loss, as a
		// resend answered from its own lock is (seed 71160).
		confirmed bool
	}{
		{name: "first grant confirmed by a resend after the loss", loss: stateLoss{kind: lossRewind, at: t0.Add(11 * time.Second), back: 5 * time.Second}, fence: 100, confirmed: true},
		{"mark set back, higher fence", stateLoss{kind: lossRewind, at: t0.Add(11 * time.Second), back: 5 * time.Second}, 100, false, false},
		{"restart, higher fence", stateLoss{kind: lossRestart, at: t0.Add(11 * time.Second)}, 100, false, false},
		{"mark set back, lower fence", stateLoss{kind: lossRewind, at: t0.Add(11 * time.Second), back: 5 * time.Second}, 5, true, false},
		{"another key's mark forgotten", stateLoss{kind: lossMarks, at: t0.Add(11 * time.Second), keys: []string{"s9"}}, 100, true, false},
		{"fence counters only", stateLoss{kind: lossFences, at: t0.Add(11 * time.Second)}, 100, true, false},
		{"mark lost after the second grant", stateLoss{kind: lossMarks, at: t0.Add(12 * time.Second)}, 100, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := handMade(scheduler.OverlapAllow)
			c.everyTick(-1)
			c.plan.losses = []stateLoss{tc.loss}
			if tc.confirmed {
				for _, g := range c.grants.all() {
					if g.tick.Equal(t0.Add(10 * time.Second)) {
						g.at = t0.Add(11500 * time.Millisecond)
						c.grants.add(g)
					}
				}
			}
			c.rerun(tc.fence)
			if got := has(c.check(), invTwice); got != tc.twice {
				t.Errorf("violation of %q: %v, want %v", invTwice, got, tc.twice)
			}
		})
	}
}

// Runs of an overlap = "skip" schedule may overlap across lost locks
// (with the later fence higher), and only then.
func TestCheckOverlapAcrossLostLocks(t *testing.T) {
	for _, tc := range []struct {
		kind    lossKind
		overlap bool
	}{{lossRestart, false}, {lossMarks, true}, {lossFences, true}} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			c := handMade(scheduler.OverlapSkip)
			c.everyTick(-1)
			c.plan.losses = []stateLoss{{kind: tc.kind, at: t0.Add(9 * time.Second)}}
			c.ledger.atts[3].end = c.ledger.atts[3].start.Add(3 * time.Second) // tick 8 runs into tick 10's run
			found := false
			for _, v := range c.check() {
				found = found || v.inv == invOverlap
			}
			if found != tc.overlap {
				t.Errorf("violation of %q: %v, want %v", invOverlap, found, tc.overlap)
			}
		})
	}
}

// A lost tick is still found after a loss of state once a grant brought
// the mark back, and not in the loss's own window.
func TestCheckLivenessAroundLostState(t *testing.T) {
	for _, tc := range []struct {
		at   int // the loss of every mark, seconds from t0
		lost bool
	}{{3, true}, {13, false}} {
		c := handMade(scheduler.OverlapSkip)
		c.everyTick(14)
		c.plan.losses = []stateLoss{{kind: lossMarks, at: t0.Add(time.Duration(tc.at)*time.Second + time.Millisecond)}}
		found := false
		for _, v := range c.check() {
			found = found || v.inv == invLiveness
		}
		if found != tc.lost {
			t.Errorf("marks lost at %ds: violation of %q: %v, want %v", tc.at, invLiveness, found, tc.lost)
		}
	}
}

// A manual run's take does not bring a forgotten mark back (it takes the
// lock, not the tick: the mark stays missing, and ticks asked a skew late
// are still told done), so ticks after it stay excused until a
// try-lock-tick's grant; a grant after the loss makes them count again
// (seeds 16180, 16833, 40735, 10429: marks forgotten, a trigger or a
// backfill taken, every later tick told done on every node).
func TestCheckLivenessTakeDoesNotRestoreMark(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grant bool // a try-lock-tick's grant (tick 14's run) after the loss
		lost  bool
	}{{"take only", false, false}, {"take and a grant", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := handMade(scheduler.OverlapAllow)
			c.ran(2, time.Second, 2)
			c.plan.losses = []stateLoss{{kind: lossMarks, at: t0.Add(3*time.Second + time.Millisecond)}}
			c.ranManual("node-0", "trigger-0", 5_500, 100, false)
			if tc.grant {
				c.ran(14, time.Second, 200)
			}
			found := false
			for _, v := range c.check() {
				if v.inv != invLiveness {
					t.Errorf("found %q (%s), want only %q", v.inv, v.msg, invLiveness)
				}
				found = true
			}
			if found != tc.lost {
				t.Errorf("violation of %q: %v, want %v", invLiveness, found, tc.lost)
			}
		})
	}
}

// A grant whose reply was lost and whose resend was answered granted (the
// same grant, found by its token) was heard: skipped with a reason once
// heard (here its lease ran out in the jitter), it is consumed as the
// contract allows, as a grant heard at once is (seed 949: the resend's
// late grant renewed, the renewal hung past the lease, the jitter's next
// renewal found it ended). Without the resend's answer it is the loss
// invariant 2 is about.
func TestCheckGrantHeardThroughItsResend(t *testing.T) {
	for _, resent := range []bool{false, true} {
		c := handMade(scheduler.OverlapSkip)
		c.everyTick(-1)
		tk := t0.Add(31 * time.Second)
		seq := c.seq.Add(4)
		c.grants.add(grant{node: "node-0", key: "s0", tick: tk, fence: 40, token: "t40",
			ttl: 8 * time.Second, at: t0.Add(29 * time.Second), issued: seq - 3, returned: seq - 2})
		if resent {
			c.grants.add(grant{node: "node-0", key: "s0", tick: tk, fence: 40, token: "t40",
				ttl: 8 * time.Second, at: t0.Add(29500 * time.Millisecond), issued: seq - 1, returned: seq, delivered: true})
		}
		c.skips[skipKey{"node-0", 0, "s0", tk.UnixNano()}] = scheduler.SkipBackendError
		vs := c.check()
		if resent && len(vs) != 0 {
			t.Errorf("a grant heard through its resend and skipped: %+v, want no violation", vs)
		}
		if !resent {
			wantOnly(t, vs, invLost)
		}
	}
}

// A grant whose reply was lost stays in its node's hands while the node
// resends (locking.GrantKeep from the grant), and its last resend is
// answered when its batch is: batched try-lock-ticks wait for the latest
// deadline of the batch (scheduler's batchContext), another schedule's
// TTL, or its resends' keep, not the grant's own TTL (seeds 477050 and
// 493444: TTLs 4s and 5s, the last resend in a batch with a 13s and an
// 11s TTL, the node crashed 12.048s and 19.7s after the grant, still
// waiting). A node that crashed within that is excused; one that crashed
// later is not.
func TestCheckLostReplyWhoseNodeCrashedWaitingOnItsBatch(t *testing.T) {
	for _, crashAfter := range []time.Duration{25 * time.Second, 45 * time.Second} {
		c := handMade(scheduler.OverlapSkip)
		c.plan.span = 60 * time.Second
		c.plan.scheds = append(c.plan.scheds, schedPlan{period: time.Minute, Schedule: scheduler.Schedule{ID: "s9",
			CronExpr: "0 * * * * *", Hint: hints.RequireGlobal, Overlap: scheduler.OverlapSkip, ExpectedRuntime: 10 * time.Second}})
		c.everyTick(4)
		tk := t0.Add(4 * time.Second)
		c.plan.nodes[0].lives[0].to = tk.Add(crashAfter)
		seq := c.seq.Add(2)
		c.grants.add(grant{node: "node-0", key: "s0", tick: tk, fence: 4, token: "t4",
			ttl: 8 * time.Second, at: tk, issued: seq - 1, returned: seq})
		var lost []violation
		for _, v := range c.check() {
			if v.inv == invLost {
				lost = append(lost, v)
			}
		}
		if crashAfter == 25*time.Second && len(lost) != 0 {
			t.Errorf("a lost reply's node crashed %v after the grant, its last resend's batch (a 12s TTL in it) still waiting: %+v; want excused", crashAfter, lost)
		}
		if crashAfter == 45*time.Second && len(lost) == 0 {
			t.Errorf("a lost reply's node crashed %v after the grant, past its resends and their batches: no violation; want %q", crashAfter, invLost)
		}
	}
}
