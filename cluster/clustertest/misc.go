package clustertest

import (
	"context"
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
)

// A backfill tick stays at the head while it runs and after its lock is
// released (a node that died mid-run leaves it to the next), until Done;
// a second Done of the same tick leaves the next one alone.
func caseBackfill(s *suite) {
	a, b := s.store(), s.store()
	b1, b2, b3 := request("job", "b1", 60, true), request("job", "b2", 120, true), request("job", "b3", 180, true)
	s.check(a.Enqueue(s.ctx, []cluster.Request{b1, b2, b3}), "Enqueue of a backfill")
	tk := s.take(b, "job", "node-b")
	s.wantTaken(tk, b1, "first TakeRequest")
	s.wantQueue(a, "job", []cluster.Request{b1, b2, b3}, "while b1 runs")
	if tk2 := s.take(a, "job", "node-a"); tk2.Handle != nil || !tk2.Contended {
		s.t.Fatalf("TakeRequest while b1's lock is held = handle %v, contended %v; want contended", tk2.Handle, tk2.Contended)
	}
	s.release(b, tk.Handle, "b1 (its node died before Done)")

	tk = s.take(a, "job", "node-a")
	s.wantTaken(tk, b1, "TakeRequest after b1's lock was freed without Done")
	node, err := b.Accepted(s.ctx, "job", "b1")
	s.check(err, "Accepted(b1)")
	if node != "node-a" {
		s.t.Fatalf("Accepted(b1) = %q, want the node that took it last, node-a", node)
	}
	s.check(a.Done(s.ctx, b1), "Done(b1)")
	s.wantQueue(b, "job", []cluster.Request{b2, b3}, "after Done(b1)")
	s.check(a.Done(s.ctx, b1), "Done(b1) again")
	s.wantQueue(b, "job", []cluster.Request{b2, b3}, "after a second Done(b1)")
	s.release(a, tk.Handle, "b1")

	for _, want := range []cluster.Request{b2, b3} {
		tk = s.take(b, "job", "node-b")
		s.wantTaken(tk, want, "TakeRequest of "+want.ID)
		s.check(b.Done(s.ctx, want), "Done("+want.ID+")")
		s.release(b, tk.Handle, want.ID)
	}
	s.wantQueue(a, "job", nil, "after the whole backfill")
	s.wantQueued(a, nil, "after the whole backfill")
}

// Done removes its backfill tick when another request heads the queue (a
// trigger put back at the head while the tick ran: a give-back, an
// unheard take's requeue). Left there, the tick ran again on the next take
// (sim seed 542433: a backfill run twice).
func caseBackfillDoneNotAtHead(s *suite) {
	a, b := s.store(), s.store()
	b1, b2 := request("job", "b1", 60, true), request("job", "b2", 120, true)
	s.check(a.Enqueue(s.ctx, []cluster.Request{b1, b2}), "Enqueue of a backfill")
	s.check(b.Done(s.ctx, b2), "Done(b2) behind b1")
	s.wantQueue(a, "job", []cluster.Request{b1}, "after Done(b2), not the head")
	s.check(b.Done(s.ctx, b2), "Done(b2) again")
	s.wantQueue(a, "job", []cluster.Request{b1}, "after a second Done(b2)")
	s.check(b.Done(s.ctx, b1), "Done(b1)")
	s.wantQueue(a, "job", nil, "after Done(b1)")
	s.wantQueued(a, nil, "after Done(b1)")
}

// While a backfill is queued another is refused with ErrBusy and stores
// nothing; triggers are still welcome; once it is done a new one is too.
// Other schedules are unaffected.
func caseBackfillBusy(s *suite) {
	a, b := s.store(), s.store()
	b1, b2 := request("job", "b1", 60, true), request("job", "b2", 120, true)
	s.check(a.Enqueue(s.ctx, []cluster.Request{b1, b2}), "Enqueue of a backfill")
	c1, c2 := request("job", "c1", 600, true), request("job", "c2", 660, true)
	s.wantErrIs(b.Enqueue(s.ctx, []cluster.Request{c1, c2}), cluster.ErrBusy, "Enqueue of a second backfill")
	s.wantQueue(a, "job", []cluster.Request{b1, b2}, "after the refused backfill")
	t1 := request("job", "t1", 5, false)
	s.check(b.Enqueue(s.ctx, []cluster.Request{t1}), "Enqueue of a trigger during a backfill")
	o1 := request("other", "o1", 60, true)
	s.check(b.Enqueue(s.ctx, []cluster.Request{o1}), "Enqueue of another schedule's backfill")
	s.wantQueue(a, "job", []cluster.Request{b1, b2, t1}, "after the trigger")

	for _, want := range []cluster.Request{b1, b2} {
		tk := s.take(a, "job", "node-a")
		s.wantTaken(tk, want, "TakeRequest of "+want.ID)
		// Still busy while the last tick runs.
		s.wantErrIs(b.Enqueue(s.ctx, []cluster.Request{c1}), cluster.ErrBusy, "Enqueue of a backfill while "+want.ID+" runs")
		s.check(a.Done(s.ctx, want), "Done("+want.ID+")")
		s.release(a, tk.Handle, want.ID)
	}
	s.check(b.Enqueue(s.ctx, []cluster.Request{c1, c2}), "Enqueue of a backfill after the first one is done")
	s.wantQueue(a, "job", []cluster.Request{t1, c1, c2}, "after the new backfill")
}

// 32 nodes racing for a backfill tick: one runs it.
func caseBackfillRace(s *suite) {
	b1 := request("job", "b1", 60, true)
	s.check(s.store().Enqueue(s.ctx, []cluster.Request{b1, request("job", "b2", 120, true)}), "Enqueue")
	stores, taken := s.raceTake(32, "job")
	w := winners(taken)
	if len(w) != 1 {
		s.t.Fatalf("%d of 32 racing nodes took the backfill tick (%v), want exactly 1", len(w), w)
	}
	s.wantTaken(taken[w[0]], b1, "the winner")
	s.check(stores[w[0]].Done(s.ctx, b1), "Done")
	s.release(stores[w[0]], taken[w[0]].Handle, "the winner")
	s.wantQueue(stores[0], "job", []cluster.Request{request("job", "b2", 120, true)}, "after the race")
}

// Accepted is empty until a node takes the request, then names it, on
// every node.
func caseAccepted(s *suite) {
	a, b := s.store(), s.store()
	r := request("job", "t1", 1, false)
	for _, id := range []string{"t1", "never-asked"} {
		node, err := a.Accepted(s.ctx, "job", id)
		s.check(err, "Accepted before")
		if node != "" {
			s.t.Fatalf("Accepted(%s) = %q before anyone took it, want empty", id, node)
		}
	}
	s.check(a.Enqueue(s.ctx, []cluster.Request{r}), "Enqueue")
	node, err := a.Accepted(s.ctx, "job", "t1")
	s.check(err, "Accepted while queued")
	if node != "" {
		s.t.Fatalf("Accepted(t1) = %q while queued, want empty", node)
	}
	tk := s.take(b, "job", "node-b")
	s.wantTaken(tk, r, "TakeRequest")
	for _, st := range []cluster.Store{a, b} {
		node, err := st.Accepted(s.ctx, "job", "t1")
		s.check(err, "Accepted")
		if node != "node-b" {
			s.t.Fatalf("Accepted(t1) = %q, want node-b", node)
		}
	}
	// Still answered after the run ended (the CLI may ask late).
	s.release(b, tk.Handle, "t1")
	if node, err := a.Accepted(s.ctx, "job", "t1"); err != nil || node != "node-b" {
		s.t.Fatalf("Accepted(t1) after the run = %q, %v, want node-b", node, err)
	}
	if node, err := a.Accepted(s.ctx, "other", "t1"); err != nil || node != "" {
		s.t.Fatalf("Accepted(other, t1) = %q, %v: the id belongs to job, want empty", node, err)
	}
}

// Held reports the schedule's own lock, whoever took it.
func caseHeld(s *suite) {
	a, b := s.store(), s.store()
	held := func(st cluster.Store, key string) bool {
		s.t.Helper()
		h, err := st.Held(s.ctx, key)
		s.check(err, fmt.Sprintf("Held(%q)", key))
		return h
	}
	if held(a, "job") {
		s.t.Fatal("Held(job) = true before any lock")
	}
	l := s.locker(b)
	h, err := l.TryLock(s.ctx, "job", longTTL)
	if err != nil || h == nil {
		s.t.Fatalf("TryLock(job) = %v, %v", h, err)
	}
	if !held(a, "job") {
		s.t.Fatal("Held(job) = false while another node's Locker holds it")
	}
	if held(a, "job/other") || held(a, "jo") {
		s.t.Fatal("Held of another key = true, want false")
	}
	s.check(l.Release(s.ctx, h), "Release")
	if held(a, "job") {
		s.t.Fatal("Held(job) = true after Release")
	}
}

// Two clusters on one server share nothing: runs, nodes, requests,
// acceptances, locks.
func caseNamespaces(s *suite) {
	a, o := s.store(), s.other()
	s.check(a.RecordRuns(s.ctx, []cluster.Run{run("job", 1, "a")}, 10), "RecordRuns")
	s.check(a.Announce(s.ctx, node("node-a", nil), longTTL), "Announce")
	r := request("job", "t1", 1, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r, request("job", "t2", 2, false)}), "Enqueue")
	s.check(a.Enqueue(s.ctx, []cluster.Request{request("job", "b1", 60, true)}), "Enqueue of a backfill")
	tk := s.take(a, "job", "node-a")
	s.wantTaken(tk, r, "TakeRequest")

	if rs := s.runs(o, "job", 10); len(rs) != 0 {
		s.t.Fatalf("the other cluster sees runs %v", runIDs(rs))
	}
	if lr, err := o.LastRuns(s.ctx, []string{"job"}); err != nil || len(lr) != 0 {
		s.t.Fatalf("the other cluster's LastRuns = %v, %v, want empty", lr, err)
	}
	s.wantNodes(o, nil, "the other cluster")
	s.wantQueued(o, nil, "the other cluster")
	s.wantQueue(o, "job", nil, "the other cluster")
	if node, err := o.Accepted(s.ctx, "job", "t1"); err != nil || node != "" {
		s.t.Fatalf("the other cluster's Accepted(t1) = %q, %v, want empty", node, err)
	}
	if h, err := o.Held(s.ctx, "job"); err != nil || h {
		s.t.Fatalf("the other cluster's Held(job) = %v, %v, want false", h, err)
	}
	// Its own backfill is not busy with ours, and its lock is its own.
	ob := request("job", "ob1", 60, true)
	s.check(o.Enqueue(s.ctx, []cluster.Request{ob}), "the other cluster's backfill")
	otk := s.take(o, "job", "node-o")
	s.wantTaken(otk, ob, "the other cluster's TakeRequest while ours holds job")
	s.check(o.Done(s.ctx, ob), "the other cluster's Done")
	s.release(o, otk.Handle, "the other cluster's")
	s.check(o.Leave(s.ctx, "node-a"), "the other cluster's Leave(node-a)")

	// Ours is as it was.
	s.wantRuns(s.runs(a, "job", 10), []cluster.Run{run("job", 1, "a")}, "our runs")
	s.wantNodes(a, []cluster.Node{node("node-a", nil)}, "our nodes")
	s.wantQueue(a, "job", []cluster.Request{request("job", "t2", 2, false), request("job", "b1", 60, true)}, "our queue")
	s.release(a, tk.Handle, "ours")
}

// Bad input is refused with ErrInvalid, never a panic, and a batch with
// one bad item stores nothing.
func caseBadInput(s *suite) {
	st := s.store()
	good := run("job", 1, "n")
	noID := run("job", 2, "n")
	noID.RunID = ""
	noSched := run("", 3, "n")
	ctl := run("job\n", 4, "n")
	oddAnomaly := run("job", 5, "n")
	oddAnomaly.Anomaly = "slow"
	okReq := request("job", "t1", 1, false)
	noReqID := request("job", "", 1, false)
	noReqSched := request("", "t2", 1, false)
	noTick := request("job", "t3", 1, false)
	noTick.Tick = time.Time{}

	bad := map[string]func() error{
		"RecordRuns(run without run id)":   func() error { return st.RecordRuns(s.ctx, []cluster.Run{good, noID}, 10) },
		"RecordRuns(run without schedule)": func() error { return st.RecordRuns(s.ctx, []cluster.Run{good, noSched}, 10) },
		"RecordRuns(control character)":    func() error { return st.RecordRuns(s.ctx, []cluster.Run{good, ctl}, 10) },
		"RecordRuns(keep 0)":               func() error { return st.RecordRuns(s.ctx, []cluster.Run{good}, 0) },
		"RecordRuns(unknown anomaly)":      func() error { return st.RecordRuns(s.ctx, []cluster.Run{good, oddAnomaly}, 10) },
		"RecordSkips(skip without schedule)": func() error {
			return st.RecordSkips(s.ctx, []cluster.Skip{skip("job", 1, "n", "paused"), skip("", 2, "n", "paused")}, 10)
		},
		"RecordSkips(skip without tick)": func() error {
			k := skip("job", 2, "n", "paused")
			k.Tick = time.Time{}
			return st.RecordSkips(s.ctx, []cluster.Skip{skip("job", 1, "n", "paused"), k}, 10)
		},
		"RecordSkips(skip without reason)": func() error {
			return st.RecordSkips(s.ctx, []cluster.Skip{skip("job", 1, "n", "paused"), skip("job", 2, "n", "")}, 10)
		},
		"RecordSkips(keep 0)":         func() error { return st.RecordSkips(s.ctx, []cluster.Skip{skip("job", 1, "n", "paused")}, 0) },
		"Skips(empty schedule)":       func() error { _, err := st.Skips(s.ctx, "", 10); return err },
		"Skips(limit 0)":              func() error { _, err := st.Skips(s.ctx, "job", 0); return err },
		"Runs(empty schedule)":        func() error { _, err := st.Runs(s.ctx, "", 10); return err },
		"Runs(limit 0)":               func() error { _, err := st.Runs(s.ctx, "job", 0); return err },
		"Runs(limit -1)":              func() error { _, err := st.Runs(s.ctx, "job", -1); return err },
		"LastRuns(empty id)":          func() error { _, err := st.LastRuns(s.ctx, []string{"job", ""}); return err },
		"Announce(empty node id)":     func() error { return st.Announce(s.ctx, node("", nil), longTTL) },
		"Announce(ttl 0)":             func() error { return st.Announce(s.ctx, node("n", nil), 0) },
		"Leave(empty node id)":        func() error { return st.Leave(s.ctx, "") },
		"Enqueue(request without id)": func() error { return st.Enqueue(s.ctx, []cluster.Request{okReq, noReqID}) },
		"Enqueue(request without schedule)": func() error {
			return st.Enqueue(s.ctx, []cluster.Request{okReq, noReqSched})
		},
		"Enqueue(request without tick)": func() error { return st.Enqueue(s.ctx, []cluster.Request{okReq, noTick}) },
		"Requests(empty schedule)":      func() error { _, err := st.Requests(s.ctx, ""); return err },
		"TakeRequest(empty schedule)":   func() error { _, err := st.TakeRequest(s.ctx, cluster.TakeReq{Node: "n", TTL: longTTL}); return err },
		"TakeRequest(empty node)": func() error {
			_, err := st.TakeRequest(s.ctx, cluster.TakeReq{Schedule: "job", TTL: longTTL})
			return err
		},
		"TakeRequest(ttl 0)":             func() error { _, err := st.TakeRequest(s.ctx, cluster.TakeReq{Schedule: "job", Node: "n"}); return err },
		"Done(request without id)":       func() error { return st.Done(s.ctx, noReqID) },
		"Done(request without schedule)": func() error { return st.Done(s.ctx, noReqSched) },
		"Accepted(empty schedule)":       func() error { _, err := st.Accepted(s.ctx, "", "t1"); return err },
		"Accepted(empty id)":             func() error { _, err := st.Accepted(s.ctx, "job", ""); return err },
		"Held(empty schedule)":           func() error { _, err := st.Held(s.ctx, ""); return err },
		"RecordAction(empty schedule)":   func() error { return st.RecordAction(s.ctx, action("", "pause", 1), 10) },
		"RecordAction(no kind)":          func() error { return st.RecordAction(s.ctx, action("job", "", 1), 10) },
		"Actions(empty schedule)":        func() error { _, err := st.Actions(s.ctx, "", 10); return err },
		"Actions(limit 0)":               func() error { _, err := st.Actions(s.ctx, "job", 0); return err },
		"RequestStop(no id)":             func() error { return st.RequestStop(s.ctx, stopReq("", 1), longTTL) },
		"RequestStop(ttl 0)":             func() error { return st.RequestStop(s.ctx, stopReq("x", 1), 0) },
		"RequestStop(no run)": func() error {
			r := stopReq("x", 1)
			r.RunIDs = nil
			return st.RequestStop(s.ctx, r, longTTL)
		},
		"StopActed(no id)":            func() error { return st.StopActed(s.ctx, "", "n", nil) },
		"StopActed(no node)":          func() error { return st.StopActed(s.ctx, "x", "", nil) },
		"CancelQueue(empty schedule)": func() error { _, err := st.CancelQueue(s.ctx, ""); return err },
	}
	for what, f := range bad {
		s.noPanic(what, func() { s.wantErrIs(f(), cluster.ErrInvalid, what) })
	}
	// Nothing of a refused batch was stored.
	if rs := s.runs(st, "job", 10); len(rs) != 0 {
		s.t.Fatalf("after refused RecordRuns batches, history = %v, want empty (check every run before storing any)", runIDs(rs))
	}
	if ks := s.skips(st, "job", 10); len(ks) != 0 {
		s.t.Fatalf("after refused RecordSkips batches, skips = %v, want none (check every skip before storing any)", skipTicks(ks))
	}
	s.wantQueue(st, "job", nil, "after refused Enqueue batches")
	s.wantNodes(st, nil, "after refused announcements")
}

// A cancelled context fails every method.
func caseCancelled(s *suite) {
	st := s.store()
	ctx, cancel := context.WithCancel(s.ctx)
	cancel()
	calls := map[string]func() error{
		"RecordRuns": func() error { return st.RecordRuns(ctx, []cluster.Run{run("job", 1, "n")}, 10) },
		"Runs":       func() error { _, err := st.Runs(ctx, "job", 10); return err },
		"LastRuns":   func() error { _, err := st.LastRuns(ctx, []string{"job"}); return err },
		"RecordSkips": func() error {
			return st.RecordSkips(ctx, []cluster.Skip{skip("job", 1, "n", "paused")}, 10)
		},
		"Skips":        func() error { _, err := st.Skips(ctx, "job", 10); return err },
		"Announce":     func() error { return st.Announce(ctx, node("n", nil), longTTL) },
		"Nodes":        func() error { _, err := st.Nodes(ctx); return err },
		"Leave":        func() error { return st.Leave(ctx, "n") },
		"Enqueue":      func() error { return st.Enqueue(ctx, []cluster.Request{request("job", "t1", 1, false)}) },
		"Queued":       func() error { _, err := st.Queued(ctx); return err },
		"Requests":     func() error { _, err := st.Requests(ctx, "job"); return err },
		"RecordAction": func() error { return st.RecordAction(ctx, action("job", "pause", 1), 10) },
		"Actions":      func() error { _, err := st.Actions(ctx, "job", 10); return err },
		"RequestStop":  func() error { return st.RequestStop(ctx, stopReq("x", 1), longTTL) },
		"StopRequests": func() error { _, err := st.StopRequests(ctx); return err },
		"StopActed":    func() error { return st.StopActed(ctx, "x", "n", nil) },
		"CancelQueue":  func() error { _, err := st.CancelQueue(ctx, "job"); return err },
		"TakeRequest": func() error {
			_, err := st.TakeRequest(ctx, cluster.TakeReq{Schedule: "job", Node: "n", TTL: longTTL})
			return err
		},
		"Done":     func() error { return st.Done(ctx, request("job", "b1", 1, true)) },
		"Accepted": func() error { _, err := st.Accepted(ctx, "job", "t1"); return err },
		"Held":     func() error { _, err := st.Held(ctx, "job"); return err },
	}
	for what, f := range calls {
		if err := f(); err == nil {
			s.t.Errorf("%s with a cancelled context = nil, want an error", what)
		}
	}
}
