package clustertest

import (
	"fmt"
	"slices"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
)

func action(schedule, kind string, sec int) cluster.Action {
	return cluster.Action{Schedule: schedule, Kind: kind, By: "ops@host-" + kind,
		At: base.Add(time.Duration(sec) * time.Second), Note: fmt.Sprintf("note %d ü", sec)}
}

func (s *suite) actions(st cluster.Store, schedule string, limit int) []cluster.Action {
	s.t.Helper()
	as, err := st.Actions(s.ctx, schedule, limit)
	s.check(err, fmt.Sprintf("Actions(%q, %d)", schedule, limit))
	return as
}

// Actions come back newest first, every field as recorded, from any
// store of the cluster; keep bounds them (never more than 2×keep); a
// schedule's actions are its own.
func caseActions(s *suite) {
	a, b := s.store(), s.store()
	kinds := []string{cluster.ActionPause, cluster.ActionResume, cluster.ActionTrigger,
		cluster.ActionBackfill, cluster.ActionStop, cluster.ActionCancel}
	var all []cluster.Action
	for i, k := range kinds {
		ac := action("job", k, i)
		all = append(all, ac)
		st := a
		if i%2 == 1 {
			st = b
		}
		s.check(st.RecordAction(s.ctx, ac, 100), "RecordAction("+k+")")
	}
	s.check(a.RecordAction(s.ctx, action("other", cluster.ActionPause, 99), 100), "RecordAction(other)")
	got := s.actions(b, "job", 100)
	if len(got) != len(all) {
		s.t.Fatalf("Actions = %d, want %d: %+v", len(got), len(all), got)
	}
	for i, g := range got {
		w := all[len(all)-1-i]
		if g.Schedule != w.Schedule || g.Kind != w.Kind || g.By != w.By || g.Note != w.Note || !g.At.Equal(w.At) {
			s.t.Fatalf("Actions[%d] = %+v, want %+v (newest first)", i, g, w)
		}
	}
	if got := s.actions(a, "job", 2); len(got) != 2 || got[0].Kind != cluster.ActionCancel {
		s.t.Fatalf("Actions(limit 2) = %+v, want the 2 newest", got)
	}
	if got := s.actions(a, "other", 10); len(got) != 1 {
		s.t.Fatalf("Actions(other) = %+v, want its one action", got)
	}
	if got := s.actions(a, "none", 10); len(got) != 0 {
		s.t.Fatalf("Actions(none) = %+v, want none", got)
	}
	for i := range 20 {
		s.check(a.RecordAction(s.ctx, action("kept", cluster.ActionTrigger, i), 3), "RecordAction(kept)")
	}
	got = s.actions(a, "kept", 100)
	if len(got) < 3 || len(got) > 6 || !got[0].At.Equal(base.Add(19*time.Second)) || !got[2].At.Equal(base.Add(17*time.Second)) {
		s.t.Fatalf("20 actions kept 3: got %d, newest %v; want 3 to 6, the newest first", len(got), got)
	}
	long := action("job", cluster.ActionPause, 50)
	long.Note = string(make([]byte, 3*cluster.MaxErrorLen))
	s.check(a.RecordAction(s.ctx, long, 100), "RecordAction(long note)")
	if g := s.actions(a, "job", 1)[0]; len(g.Note) > cluster.MaxErrorLen {
		s.t.Fatalf("a note of %d bytes came back with %d, want at most %d", len(long.Note), len(g.Note), cluster.MaxErrorLen)
	}
}

func stopReq(id string, sec int) cluster.StopRequest {
	return cluster.StopRequest{ID: id, Schedule: "job", RunIDs: []string{"r-" + id, "r2-" + id}, By: "ops@host", At: base.Add(time.Duration(sec) * time.Second)}
}

func (s *suite) stops(st cluster.Store) []cluster.StopRequest {
	s.t.Helper()
	rs, err := st.StopRequests(s.ctx)
	s.check(err, "StopRequests")
	return rs
}

// Stop requests are listed to every store of the cluster, oldest first,
// with their reason and what each node stopped; a resend keeps them; one acting again
// replaces its part; an unknown request takes no act.
func caseStops(s *suite) {
	a, b := s.store(), s.store()
	if got := s.stops(a); len(got) != 0 {
		s.t.Fatalf("StopRequests on a new cluster = %+v, want none", got)
	}
	s2 := stopReq("s2", 2)
	s2.Reason = cluster.StopReplace // a later tick's (overlap = "replace"): its runs end replaced
	s.check(a.RequestStop(s.ctx, s2, longTTL), "RequestStop(s2)")
	s.check(b.RequestStop(s.ctx, stopReq("s1", 1), longTTL), "RequestStop(s1)")
	got := s.stops(b)
	if len(got) != 2 || got[0].ID != "s1" || got[1].ID != "s2" || got[0].By != "ops@host" || got[0].Schedule != "job" ||
		!got[0].At.Equal(base.Add(time.Second)) || got[0].Stopped == nil || len(got[0].Stopped) != 0 ||
		!slices.Equal(got[0].RunIDs, []string{"r-s1", "r2-s1"}) {
		s.t.Fatalf("StopRequests = %+v, want s1 then s2, nothing stopped yet (an empty list)", got)
	}
	if got[0].Reason != "" || got[1].Reason != cluster.StopReplace {
		s.t.Fatalf("StopRequests' reasons %q, %q, want \"\" (an operator's) and %q", got[0].Reason, got[1].Reason, cluster.StopReplace)
	}
	sa := []cluster.Stopped{{Node: "node-a", Tick: base, RunID: "r1"}}
	sb := []cluster.Stopped{{Node: "node-b", Tick: base, RunID: "r2"}, {Node: "node-b", Tick: base.Add(time.Minute), RunID: "r3"}}
	s.check(b.StopActed(s.ctx, "s1", "node-b", sb), "StopActed(node-b)")
	s.check(a.StopActed(s.ctx, "s1", "node-a", []cluster.Stopped{{Node: "node-a", RunID: "old"}}), "StopActed(node-a)")
	s.check(a.StopActed(s.ctx, "s1", "node-a", sa), "StopActed(node-a) again")
	s.check(a.StopActed(s.ctx, "no-such", "node-a", sa), "StopActed(unknown request)")
	s.check(b.RequestStop(s.ctx, stopReq("s1", 1), longTTL), "RequestStop(s1) resent")
	got = s.stops(a)
	if len(got) != 2 {
		s.t.Fatalf("StopRequests = %+v, want s1 and s2 (a resend stores once, an act on an unknown one nothing)", got)
	}
	want := append(slices.Clone(sa), sb...)
	st := got[0].Stopped
	if len(st) != len(want) {
		s.t.Fatalf("s1 stopped %+v, want %+v (by node)", st, want)
	}
	for i := range want {
		if st[i].Node != want[i].Node || st[i].RunID != want[i].RunID || !st[i].Tick.Equal(want[i].Tick) {
			s.t.Fatalf("s1 stopped %+v, want %+v (by node)", st, want)
		}
	}
	if len(got[1].Stopped) != 0 {
		s.t.Fatalf("s2 stopped %+v, want nothing", got[1].Stopped)
	}
}

// A stop request expires after its ttl.
func caseStopExpiry(s *suite) {
	st := s.store()
	ttl := nodeTTL
	if s.b.Advance != nil {
		ttl = time.Minute
	}
	s.check(st.RequestStop(s.ctx, stopReq("short", 1), ttl), "RequestStop(short)")
	s.check(st.RequestStop(s.ctx, stopReq("long", 2), 10*longTTL), "RequestStop(long)")
	if got := s.stops(st); len(got) != 2 {
		s.t.Fatalf("StopRequests = %+v, want both", got)
	}
	s.passTime(ttl + realSlack)
	got := s.stops(st)
	if len(got) != 1 || got[0].ID != "long" {
		s.t.Fatalf("after the short one's ttl, StopRequests = %+v, want only long", got)
	}
	s.check(st.StopActed(s.ctx, "short", "n", nil), "StopActed(expired)")
}

// CancelQueue drops a schedule's triggers and backfill ticks, says how
// many, and leaves other schedules' queues; a backfill may be queued
// again after it.
func caseCancelQueue(s *suite) {
	a, b := s.store(), s.store()
	s.check(a.Enqueue(s.ctx, []cluster.Request{request("job", "t1", 1, false), request("job", "t2", 2, false)}), "Enqueue(triggers)")
	s.check(a.Enqueue(s.ctx, []cluster.Request{request("job", "b1", 3, true), request("job", "b2", 4, true),
		request("job", "b3", 5, true)}), "Enqueue(backfill)")
	o := request("other", "o1", 1, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{o}), "Enqueue(other)")
	n, err := b.CancelQueue(s.ctx, "job")
	s.check(err, "CancelQueue(job)")
	if n != 5 {
		s.t.Fatalf("CancelQueue = %d, want 5", n)
	}
	s.wantQueue(a, "job", nil, "after CancelQueue")
	s.wantQueue(a, "other", []cluster.Request{o}, "the other schedule after CancelQueue")
	s.wantQueued(a, []string{"other"}, "after CancelQueue")
	if n, err := b.CancelQueue(s.ctx, "job"); err != nil || n != 0 {
		s.t.Fatalf("CancelQueue of an empty queue = %d, %v; want 0, nil", n, err)
	}
	tk, err := a.TakeRequest(s.ctx, cluster.TakeReq{Schedule: "job", Node: "n", TTL: longTTL})
	s.check(err, "TakeRequest after CancelQueue")
	if tk.Request != nil || tk.Handle != nil {
		s.t.Fatalf("TakeRequest after CancelQueue = %+v, want nothing to take", tk)
	}
	s.check(a.Enqueue(s.ctx, []cluster.Request{request("job", "b4", 6, true)}), "Enqueue(backfill) after CancelQueue")
}
