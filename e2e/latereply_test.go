package e2e

import (
	"testing"
	"time"
)

// lateReplySpec: every tick may run late by up to 10s (catchup_window), and
// runs of consecutive ticks may overlap (overlap = "allow", per-tick locks),
// so a grant whose reply came late can still run, and a node whose reply
// is late keeps no lock that makes the next ticks contended.
//
// The lease is long enough (3s usable, renewed every second) for a run of
// the ledger job (under a second here) to need no renewal: a renewal that
// meets the fault is not answered, and its run is cancelled (lock_lost)
// by design. This scenario is about the try-lock-tick's answer.
func lateReplySpec(kind string) Spec {
	s := Spec{Nodes: 3, Overlap: "allow", CatchupWindow: 10 * time.Second, MaxClockSkew: time.Second,
		ExpectedRuntime: 3 * time.Second}
	s.OpTimeout = 300 * time.Millisecond
	if kind == "pg" {
		// A Postgres lease is bounded by the dead-peer time, which
		// follows op_timeout (2×): at 500ms it left the 4s TTL a lease
		// of 0.25s.
		s.OpTimeout = 2 * time.Second
	}
	return s
}

// TestLateRepliesRunEveryTickOnce delays one node's backend replies past
// its op_timeout for 1.5s every few seconds, in turn, for about 40s. The
// backend decides the delayed node's try-lock-ticks on time; only their
// answers come late. A granted tick whose answer the node gave up on ran
// nowhere before the scheduler resent its request (same token, same T)
// until the backend decided: the others were told done. Every tick in the
// window must run exactly once, on the job-side ledger.
func TestLateRepliesRunEveryTickOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *Backend) {
		spec := lateReplySpec(b.Kind)
		c := startCluster(t, b, spec)
		c.WaitTicks(2, 30*time.Second)
		from := time.Now()
		// Replies only: the request reaches the backend and is decided on
		// time, and its answer arrives after the node gave up on it.
		delay := spec.OpTimeout * 4 / 3
		const (
			rounds  = 12
			faulty  = 1500 * time.Millisecond
			between = 1800 * time.Millisecond
		)
		nodes := c.Nodes()
		for i := range rounds {
			n := nodes[i%len(nodes)]
			n.Proxy.DelayReplies(delay)
			hold := time.NewTimer(faulty) // the fault's length, by design
			<-hold.C
			n.Proxy.DelayReplies(0)
			rest := time.NewTimer(between) // the gap between faults, by design
			<-rest.C
		}
		to := time.Now()
		// Let the late grants (10s window) and the catch-up settle.
		c.WaitTicks(3, 30*time.Second)
		rep := check(t, c, window(from, to))
		if rep.DoubleRuns > 0 {
			t.Errorf("%d ticks ran more than once; want none", rep.DoubleRuns)
		}
		if rep.Missed > 0 {
			t.Errorf("%d of %d ticks ran nowhere (%v); want every tick once: a late reply must not lose its grant",
				rep.Missed, rep.Ticks, rep.MissedTicks)
		}
		for _, n := range nodes {
			t.Logf("%s: backend_error %v, contended %v", n.ID,
				n.Counter("bext_scheduler_ticks_skipped_total", "schedule", globalID, "reason", "backend_error"),
				n.Counter("bext_scheduler_ticks_skipped_total", "schedule", globalID, "reason", "contended"))
		}
		t.Logf("%s: %d ticks over %v with a node's replies %v late for %v every %v",
			b.Kind, rep.Ticks, to.Sub(from).Round(time.Second), delay, faulty, faulty+between)
	})
}
