package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// raiseMark claims tick of key on st, so its tick mark is at tick.
func raiseMark(t testing.TB, st ops.Store, key string, tick time.Time) {
	t.Helper()
	lk := st.(interface {
		TryLockTick(context.Context, locking.TickRequest) (locking.TickAnswer, error)
	})
	ans, err := lk.TryLockTick(t.Context(), locking.TickRequest{Key: key, Tick: tick, TTL: time.Minute,
		MaxSkew: time.Hour, Window: 24 * time.Hour})
	if err != nil || ans.Verdict != locking.TickGranted {
		t.Fatalf("raising %s's mark to %v: %v, %v", key, tick, ans.Verdict, err)
	}
}

func minutely(id string, h hints.Hint) scheduler.Schedule {
	return scheduler.Schedule{ID: id, CronExpr: "* * * * *", Hint: h}
}

// auditFixture is one minutely schedule's history around the real clock
// (the memory backend's mark is judged on it): m is the current minute.
type auditFixture struct {
	st  ops.Store
	now time.Time
	m   func(k int) time.Time // the tick k minutes from m
}

func newAuditFixture(t *testing.T) auditFixture {
	now := time.Now().UTC()
	m := now.Truncate(time.Minute)
	return auditFixture{st: opstest.Memory(t), now: now, m: func(k int) time.Time { return m.Add(time.Duration(k) * time.Minute) }}
}

func (f auditFixture) service(scheds []scheduler.Schedule, keep int) *ops.Service {
	return ops.New(f.st, scheds, ops.Options{Clock: func() time.Time { return f.now }, Keep: keep})
}

func (f auditFixture) runs(t *testing.T, runs ...cluster.Run) {
	t.Helper()
	if err := f.st.RecordRuns(t.Context(), runs, 100); err != nil {
		t.Fatal(err)
	}
}

func (f auditFixture) skips(t *testing.T, skips ...cluster.Skip) {
	t.Helper()
	if err := f.st.RecordSkips(t.Context(), skips, 100); err != nil {
		t.Fatal(err)
	}
}

// byTick indexes an audit's rows by tick.
func byTick(rows []ops.AuditTick) map[time.Time]ops.AuditTick {
	out := map[time.Time]ops.AuditTick{}
	for _, r := range rows {
		out[r.Tick] = r
	}
	return out
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestAuditFates: every fate and reason a tick of a locked schedule can
// have, from the records one history holds.
func TestAuditFates(t *testing.T) {
	f := newAuditFixture(t)
	ctx := t.Context()
	id := "a"
	m := f.m
	f.runs(t,
		cluster.Run{Schedule: id, Tick: m(-11), Node: "n1", Result: "success", StartedAt: m(-11).Add(time.Second), Attempts: 1, RunID: "r11"},
		// A provisional record and the final one of the same tick: the
		// final wins, though the provisional one comes first (newest start).
		cluster.Run{Schedule: id, Tick: m(-10), Node: "n1", Result: cluster.ResultRunning, StartedAt: m(-10).Add(3 * time.Second), RunID: "p10"},
		cluster.Run{Schedule: id, Tick: m(-10), Node: "n2", Result: "failure", StartedAt: m(-10).Add(2 * time.Second), Duration: 1500 * time.Millisecond, Fence: 7, Attempts: 3, RunID: "r10", Error: "exit status 1"},
		cluster.Run{Schedule: id, Tick: m(-9), Node: "n3", Result: cluster.ResultRunning, StartedAt: m(-9).Add(time.Second), Fence: 8, RunID: "r9"},
		cluster.Run{Schedule: id, Tick: m(-8), Node: "n1", Result: "not_run", StartedAt: m(-8), RunID: "r8", Error: "the node stopped before it started"},
		cluster.Run{Schedule: id, Tick: m(-2), Node: "n1", Result: "success", StartedAt: m(-2).Add(time.Second), Attempts: 1, RunID: "r2"},
		// A trigger between two ticks.
		cluster.Run{Schedule: id, Tick: m(-4).Add(30 * time.Second), Node: "n2", Result: "success", StartedAt: m(-4).Add(31 * time.Second), Attempts: 1, Manual: true, RunID: "man"},
	)
	f.skips(t,
		cluster.Skip{Schedule: id, Tick: m(-7), Node: "n1", Reason: cluster.SkipPaused, Note: "incident 42", At: m(-7)},
		cluster.Skip{Schedule: id, Tick: m(-6), Node: "n2", Reason: cluster.SkipMissed, At: m(-5)},
		cluster.Skip{Schedule: id, Tick: m(-5), Node: "n2", Reason: cluster.SkipOverlap, At: m(-5)},
		cluster.Skip{Schedule: id, Tick: m(-4), Node: "n3", Reason: cluster.SkipStopped, Note: "no node asked", At: m(-2)},
	)
	raiseMark(t, f.st, id, m(-2))
	svc := f.service([]scheduler.Schedule{minutely(id, hints.RequireGlobal)}, 100)
	rows, err := svc.Audit(ctx, id, m(-13), m(2))
	if err != nil {
		t.Fatal(err)
	}
	// (m-13, m+2]: 15 ticks and the trigger.
	if len(rows) != 16 {
		t.Fatalf("%d rows, want 16: %+v", len(rows), rows)
	}
	for i := 1; i < len(rows); i++ {
		if !rows[i-1].Tick.Before(rows[i].Tick) {
			t.Fatalf("rows out of tick order at %d: %v then %v", i, rows[i-1].Tick, rows[i].Tick)
		}
	}
	got := byTick(rows)
	want := []struct {
		tick         time.Time
		fate, reason any
		node, result any
		note         any
	}{
		{m(-12), "unknown", "before_history", nil, nil, nil},
		{m(-11), "ran", nil, "n1", "success", nil},
		{m(-10), "ran", nil, "n2", "failure", nil},
		{m(-9), "ran", nil, "n3", "running", nil},
		{m(-8), "skipped", "not_run", "n1", nil, "the node stopped before it started"},
		{m(-7), "skipped", "paused", "n1", nil, "incident 42"},
		{m(-6), "skipped", "missed", "n2", nil, nil},
		{m(-5), "skipped", "overlap", "n2", nil, nil},
		{m(-4), "skipped", "stopped", "n3", nil, "no node asked"},
		{m(-4).Add(30 * time.Second), "ran", nil, "n2", "success", nil},
		{m(-3), "lost", nil, nil, nil, nil},
		{m(-2), "ran", nil, "n1", "success", nil},
		{m(-1), "pending", "undecided", nil, nil, nil},
		{m(0), "pending", "undecided", nil, nil, nil},
		{m(1), "pending", "not_due", nil, nil, nil},
		{m(2), "pending", "not_due", nil, nil, nil},
	}
	for _, w := range want {
		r, ok := got[w.tick]
		if !ok {
			t.Errorf("no row for %v", w.tick)
			continue
		}
		if r.Fate != w.fate || deref(r.Reason) != w.reason || deref(r.Node) != w.node || deref(r.Result) != w.result || deref(r.Note) != w.note {
			t.Errorf("tick %v: fate %s reason %v node %v result %v note %v; want %v %v %v %v %v", w.tick.Sub(m(0)),
				r.Fate, deref(r.Reason), deref(r.Node), deref(r.Result), deref(r.Note), w.fate, w.reason, w.node, w.result, w.note)
		}
	}
	ran := got[m(-10)]
	if deref(ran.RunID) != "r10" || deref(ran.Fence) != int64(7) || deref(ran.Attempts) != 3 || deref(ran.Manual) != false ||
		deref(ran.LatenessSeconds) != 2.0 || deref(ran.DurationSeconds) != 1.5 {
		t.Errorf("ran row %+v: want run r10, fence 7, 3 attempts, not manual, 2s late, 1.5s long", ran)
	}
	if r := got[m(-9)]; r.DurationSeconds != nil || deref(r.Attempts) != 0 {
		t.Errorf("a running record: duration %v attempts %v, want null and 0", deref(r.DurationSeconds), deref(r.Attempts))
	}
	if r := got[m(-4).Add(30*time.Second)]; deref(r.Manual) != true || deref(r.RunID) != "man" {
		t.Errorf("trigger row %+v: want manual run man", r)
	}
	for _, r := range rows {
		if r.MarkAhead != nil {
			t.Errorf("tick %v: mark_ahead %v, want null", r.Tick, *r.MarkAhead)
		}
	}
}

// TestAuditGraceAndNodeLocal: a decided tick within AuditGrace is pending
// (its records may be on their way); a node_local schedule, which has no
// mark, never loses a tick.
func TestAuditGraceAndNodeLocal(t *testing.T) {
	f := newAuditFixture(t)
	m := f.m
	f.runs(t,
		cluster.Run{Schedule: "g", Tick: m(-5), Node: "n1", Result: "success", StartedAt: m(-5), Attempts: 1, RunID: "g5"},
		cluster.Run{Schedule: "l", Tick: m(-5), Node: "n1", Result: "success", StartedAt: m(-5), Attempts: 1, RunID: "l5"},
	)
	raiseMark(t, f.st, "g", m(0))
	f.now = m(0).Add(ops.AuditGrace / 2) // the audit's clock: m(0) decided within the grace
	svc := f.service([]scheduler.Schedule{minutely("g", hints.RequireGlobal), minutely("l", hints.NodeLocal)}, 100)
	g, err := svc.Audit(t.Context(), "g", m(-5), m(0))
	if err != nil {
		t.Fatal(err)
	}
	gt := byTick(g)
	if r := gt[m(0)]; r.Fate != "pending" || deref(r.Reason) != "recording" {
		t.Errorf("a tick decided %v ago with no record: %s %v, want pending recording", f.now.Sub(m(0)), r.Fate, deref(r.Reason))
	}
	if r := gt[m(-1)]; r.Fate != "lost" {
		t.Errorf("a tick decided a minute ago or more with no record: %s, want lost", r.Fate)
	}
	l, err := svc.Audit(t.Context(), "l", m(-5), m(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range l {
		if r.Fate == "lost" {
			t.Errorf("node_local tick %v: lost", r.Tick)
		}
	}
	if r := byTick(l)[m(-2)]; r.Fate != "unknown" || deref(r.Reason) != "node_local" {
		t.Errorf("node_local tick with no record: %s %v, want unknown node_local", r.Fate, deref(r.Reason))
	}
}

// TestAuditHorizonOfATrimmedHistory: once a history holds keep records it
// may have been trimmed, and ticks before the oldest kept are unknown, not
// lost; the same records under a larger keep lose them.
func TestAuditHorizonOfATrimmedHistory(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep int
		want string
	}{{"trimmed", 3, "unknown"}, {"whole", 100, "lost"}} {
		t.Run(tc.name+"/runs", func(t *testing.T) {
			f := newAuditFixture(t)
			m := f.m
			f.runs(t,
				// A backfill of an old tick, run lately: its tick is not
				// where the kept history starts.
				cluster.Run{Schedule: "t", Tick: m(-10), Node: "n1", Result: "success", StartedAt: m(-1).Add(5 * time.Second), Attempts: 1, Manual: true, RunID: "b"},
				cluster.Run{Schedule: "t", Tick: m(-2), Node: "n1", Result: "success", StartedAt: m(-2).Add(time.Second), Attempts: 1, RunID: "r2"},
				cluster.Run{Schedule: "t", Tick: m(-1), Node: "n1", Result: "success", StartedAt: m(-1).Add(time.Second), Attempts: 1, RunID: "r1"},
			)
			raiseMark(t, f.st, "t", m(-1))
			rows, err := f.service([]scheduler.Schedule{minutely("t", hints.RequireGlobal)}, tc.keep).Audit(t.Context(), "t", m(-11), m(-1))
			if err != nil {
				t.Fatal(err)
			}
			if r := byTick(rows)[m(-5)]; r.Fate != tc.want {
				t.Errorf("keep %d: a tick between the backfilled one and the kept runs: %s, want %s", tc.keep, r.Fate, tc.want)
			}
		})
		t.Run(tc.name+"/skips", func(t *testing.T) {
			f := newAuditFixture(t)
			m := f.m
			f.runs(t, cluster.Run{Schedule: "t", Tick: m(-9), Node: "n1", Result: "success", StartedAt: m(-9), Attempts: 1, RunID: "r9"})
			for k := -4; k <= -2; k++ {
				f.skips(t, cluster.Skip{Schedule: "t", Tick: m(k), Node: "n1", Reason: cluster.SkipPaused, At: m(k)})
			}
			raiseMark(t, f.st, "t", m(-2))
			rows, err := f.service([]scheduler.Schedule{minutely("t", hints.RequireGlobal)}, tc.keep).Audit(t.Context(), "t", m(-10), m(-2))
			if err != nil {
				t.Fatal(err)
			}
			if r := byTick(rows)[m(-6)]; r.Fate != tc.want {
				t.Errorf("keep %d: a tick before the oldest skip kept: %s, want %s", tc.keep, r.Fate, tc.want)
			}
		})
	}
}

// TestAuditNoRecordsIsUnknown: a schedule with no record at all has no
// history to hold a lost tick against.
func TestAuditNoRecordsIsUnknown(t *testing.T) {
	f := newAuditFixture(t)
	raiseMark(t, f.st, "e", f.m(-1))
	rows, err := f.service([]scheduler.Schedule{minutely("e", hints.RequireGlobal)}, 100).Audit(t.Context(), "e", f.m(-5), f.m(-1))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Fate != "unknown" {
			t.Errorf("tick %v: %s, want unknown", r.Tick, r.Fate)
		}
	}
}

func TestAuditMarkAheadAndArguments(t *testing.T) {
	f := newAuditFixture(t)
	ahead := f.m(120)
	lk := f.st.(interface {
		TryLockTick(context.Context, locking.TickRequest) (locking.TickAnswer, error)
	})
	if ans, err := lk.TryLockTick(t.Context(), locking.TickRequest{Key: "x", Tick: ahead, TTL: time.Minute, MaxSkew: 3 * time.Hour, Window: time.Minute}); err != nil || ans.Verdict != locking.TickGranted {
		t.Fatal(ans.Verdict, err)
	}
	svc := f.service([]scheduler.Schedule{minutely("x", hints.RequireGlobal)}, 100)
	rows, err := svc.Audit(t.Context(), "x", time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != ops.AuditDefaultTicks {
		t.Errorf("default range: %d rows, want %d", len(rows), ops.AuditDefaultTicks)
	}
	if rows[0].MarkAhead == nil || !rows[0].MarkAhead.Equal(ahead) {
		t.Errorf("mark_ahead %v, want %v", rows[0].MarkAhead, ahead)
	}
	sums, err := svc.AuditSummary(t.Context(), time.Time{}, time.Time{})
	if err != nil || len(sums) != 1 || sums[0].MarkAhead == nil {
		t.Errorf("summary %+v, %v: want x with mark_ahead", sums, err)
	}

	if _, err := svc.Audit(t.Context(), "nope", time.Time{}, time.Time{}); !errors.Is(err, ops.ErrUnknownSchedule) {
		t.Errorf("unknown schedule: %v", err)
	}
	if _, err := svc.Audit(t.Context(), "x", f.m(0), f.m(-1)); !errors.Is(err, ops.ErrInvalid) {
		t.Errorf("--from after --to: %v", err)
	}
	_, err = svc.Audit(t.Context(), "x", f.m(-20000), f.m(0))
	if !errors.Is(err, ops.ErrInvalid) || !strings.Contains(err.Error(), "20000 ticks") {
		t.Errorf("20,000 ticks: %v, want ErrInvalid naming the count", err)
	}
}

func TestAuditSummaryCountsLostFirst(t *testing.T) {
	f := newAuditFixture(t)
	m := f.m
	for _, id := range []string{"a-fine", "b-lost"} {
		f.runs(t, cluster.Run{Schedule: id, Tick: m(-5), Node: "n1", Result: "success", StartedAt: m(-5), Attempts: 1, RunID: id + "5"},
			cluster.Run{Schedule: id, Tick: m(-2), Node: "n1", Result: "success", StartedAt: m(-2), Attempts: 1, RunID: id + "2"})
		raiseMark(t, f.st, id, m(-2))
	}
	f.runs(t, cluster.Run{Schedule: "a-fine", Tick: m(-4), Node: "n1", Result: "success", StartedAt: m(-4), Attempts: 1, RunID: "a4"})
	f.skips(t, cluster.Skip{Schedule: "a-fine", Tick: m(-3), Node: "n1", Reason: cluster.SkipOverlap, At: m(-3)},
		cluster.Skip{Schedule: "b-lost", Tick: m(-3), Node: "n1", Reason: cluster.SkipOverlap, At: m(-3)})
	svc := f.service([]scheduler.Schedule{minutely("a-fine", hints.RequireGlobal), minutely("b-lost", hints.RequireGlobal)}, 100)
	sums, err := svc.AuditSummary(t.Context(), m(-6), m(2))
	if err != nil {
		t.Fatal(err)
	}
	want := []ops.AuditSummary{
		{Schedule: "b-lost", Ran: 2, Skipped: 1, Lost: 1, Pending: 4, Unknown: 0},
		{Schedule: "a-fine", Ran: 3, Skipped: 1, Lost: 0, Pending: 4, Unknown: 0},
	}
	if len(sums) != 2 || sums[0] != want[0] || sums[1] != want[1] {
		t.Errorf("summary %+v, want %+v", sums, want)
	}
	lost, _, err := svc.LostRecently(t.Context())
	if err != nil || len(lost) != 1 || lost["b-lost"] != 1 {
		t.Errorf("lost recently %v, %v: want b-lost 1", lost, err)
	}
}

// TestAuditJSONShape pins every field of a row and a summary, present and
// null when empty.
func TestAuditJSONShape(t *testing.T) {
	late, dur, fence, att, manual := 2.0, 1.5, int64(7), 3, false
	ran := ops.AuditTick{Schedule: "a", Tick: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), Fate: "ran",
		Node: ptr("n1"), RunID: ptr("r1"), Fence: &fence, LatenessSeconds: &late, DurationSeconds: &dur,
		Result: ptr("success"), Attempts: &att, Manual: &manual}
	lost := ops.AuditTick{Schedule: "a", Tick: time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC), Fate: "lost"}
	for _, c := range []struct {
		v    any
		want string
	}{
		{ran, `{"schedule":"a","tick":"2026-01-02T03:04:00Z","fate":"ran","reason":null,"node":"n1","run_id":"r1","fence":7,"lateness_seconds":2,"duration_seconds":1.5,"result":"success","attempts":3,"manual":false,"note":null,"mark_ahead":null}`},
		{lost, `{"schedule":"a","tick":"2026-01-02T03:05:00Z","fate":"lost","reason":null,"node":null,"run_id":null,"fence":null,"lateness_seconds":null,"duration_seconds":null,"result":null,"attempts":null,"manual":null,"note":null,"mark_ahead":null}`},
		{ops.AuditSummary{Schedule: "a", Lost: 1}, `{"schedule":"a","ran":0,"skipped":0,"lost":1,"pending":0,"unknown":0,"mark_ahead":null}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("JSON\n%s\nwant\n%s", b, c.want)
		}
	}
}

func ptr(s string) *string { return &s }

// TestLostTicksRecentWindow: LostTicks names the locked schedules with a
// lost tick in their recent window (LostSpan) and how many; a schedule
// whose ticks all ran, a node_local one, an unknown id and a lost tick
// older than the window are not counted.
func TestLostTicksRecentWindow(t *testing.T) {
	f := newAuditFixture(t)
	m := f.m
	// g: ran at -30 (the horizon) and -20..-1 but -3; ok: ran -20..-1.
	f.runs(t, cluster.Run{Schedule: "g", Tick: m(-30), Node: "n1", Result: "success", StartedAt: m(-30), Attempts: 1, RunID: "g30"})
	for k := -20; k <= -1; k++ {
		if k != -3 {
			f.runs(t, cluster.Run{Schedule: "g", Tick: m(k), Node: "n1", Result: "success", StartedAt: m(k), Attempts: 1, RunID: fmt.Sprint("g", k)})
		}
		f.runs(t, cluster.Run{Schedule: "ok", Tick: m(k), Node: "n1", Result: "success", StartedAt: m(k), Attempts: 1, RunID: fmt.Sprint("ok", k)})
	}
	raiseMark(t, f.st, "g", m(-1))
	raiseMark(t, f.st, "ok", m(-1))
	f.now = m(0).Add(ops.AuditGrace / 2)
	svc := f.service([]scheduler.Schedule{minutely("g", hints.RequireGlobal), minutely("ok", hints.RequireGlobal), minutely("l", hints.NodeLocal)}, 100)
	lost, err := svc.LostTicks(t.Context(), []string{"g", "ok", "l", "nope"})
	if err != nil {
		t.Fatal(err)
	}
	// -29..-21 are lost too, but before the window: only -3 counts.
	if len(lost) != 1 || lost["g"] != 1 {
		t.Fatalf("LostTicks = %v, want g: 1 (its tick -3)", lost)
	}
	// Which tick: the lost event names it.
	times, err := svc.LostTickTimes(t.Context(), []string{"g", "ok", "l", "nope"})
	if err != nil || len(times) != 1 || len(times["g"]) != 1 || !times["g"][0].Equal(m(-3)) {
		t.Fatalf("LostTickTimes = %v, %v; want g: [%v]", times, err, m(-3))
	}
	if all, err := svc.Audit(t.Context(), "g", m(-31), m(0)); err != nil || countFate(all, ops.FateLost) != 10 {
		t.Fatalf("the full audit finds %d lost (%v), want the older ones too", countFate(all, ops.FateLost), err)
	}
}

func countFate(rows []ops.AuditTick, fate string) int {
	n := 0
	for _, r := range rows {
		if r.Fate == fate {
			n++
		}
	}
	return n
}

// A tick decided seconds ago whose record is not written yet is pending
// (recording), not lost, even while a live node's fresh announcement puts
// the bound on the backend's clock nodeSeenSlack ahead: the grace counts
// on this node's clock. The lost notification tells a lost tick at once,
// so a tick that only reads lost for the seconds its record takes would
// page for nothing.
func TestRecentTickPendingNotLost(t *testing.T) {
	f := newAuditFixture(t)
	m := f.m
	for k := -5; k <= -1; k++ {
		f.runs(t, cluster.Run{Schedule: "g", Tick: m(k), Node: "n1", Result: "success", StartedAt: m(k), Attempts: 1, RunID: fmt.Sprint("g", k)})
	}
	raiseMark(t, f.st, "g", m(0)) // decided; its run's record is on its way
	if err := f.st.Announce(t.Context(), cluster.Node{NodeID: "n1", ConfigHash: "h"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	f.now = m(0).Add(5 * time.Second)
	svc := f.service([]scheduler.Schedule{minutely("g", hints.RequireGlobal)}, 100)
	lost, err := svc.LostTickTimes(t.Context(), []string{"g"})
	if err != nil || len(lost) != 0 {
		t.Fatalf("LostTickTimes = %v, %v; want none: tick %v was decided 5s ago", lost, err, m(0))
	}
	rows, err := svc.Audit(t.Context(), "g", m(-3), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := byTick(rows)[m(0)]; !ok || r.Fate != ops.FatePending || deref(r.Reason) != ops.ReasonRecording {
		t.Errorf("audit row of %v = %+v, want pending (recording)", m(0), r)
	}
	// Past the grace, it is lost.
	f.now = m(0).Add(ops.AuditGrace + time.Second)
	svc = f.service([]scheduler.Schedule{minutely("g", hints.RequireGlobal)}, 100)
	if lost, err := svc.LostTickTimes(t.Context(), []string{"g"}); err != nil || len(lost["g"]) != 1 {
		t.Errorf("LostTickTimes past the grace = %v, %v; want g's tick %v", lost, err, m(0))
	}
}

// TestAuditCalendarSkipped: a tick on an except date is no tick to the
// scheduler, yet audit lists it, skipped by the calendar; a run recorded
// at it (the date excepted after it ran) still shows as ran.
func TestAuditCalendarSkipped(t *testing.T) {
	f := newAuditFixture(t)
	id := "daily"
	m := f.m(0)
	day := func(k int) time.Time { return m.Add(time.Duration(k) * 24 * time.Hour) }
	expr := fmt.Sprintf("%d %d * * *", m.Minute(), m.Hour())
	spec, err := cronspec.Parse(expr, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err = cronspec.WithCalendar(spec, cronspec.Calendar{Except: []string{
		day(-2).Format(time.DateOnly), "*" + day(-4).Format(time.DateOnly)[4:],
	}})
	if err != nil {
		t.Fatal(err)
	}
	f.runs(t,
		cluster.Run{Schedule: id, Tick: day(-5), Node: "n1", Result: "success", StartedAt: day(-5).Add(time.Second), Attempts: 1, RunID: "r5"},
		cluster.Run{Schedule: id, Tick: day(-4), Node: "n1", Result: "success", StartedAt: day(-4).Add(time.Second), Attempts: 1, RunID: "r4"},
		cluster.Run{Schedule: id, Tick: day(-3), Node: "n1", Result: "success", StartedAt: day(-3).Add(time.Second), Attempts: 1, RunID: "r3"},
		cluster.Run{Schedule: id, Tick: day(-1), Node: "n2", Result: "success", StartedAt: day(-1).Add(time.Second), Attempts: 1, RunID: "r1"},
		cluster.Run{Schedule: id, Tick: day(0), Node: "n2", Result: "success", StartedAt: day(0), Attempts: 1, RunID: "r0"},
	)
	raiseMark(t, f.st, id, day(0)) // the memory backend's clock is the real one: the mark can only be this recent
	svc := f.service([]scheduler.Schedule{{ID: id, CronExpr: expr, Spec: spec, Hint: hints.RequireGlobal}}, 100)
	rows, err := svc.Audit(t.Context(), id, day(-6), day(1))
	if err != nil {
		t.Fatal(err)
	}
	got := byTick(rows)
	for _, w := range []struct {
		tick         time.Time
		fate, reason any
	}{
		{day(-5), "ran", nil},
		{day(-4), "ran", nil}, // excepted every year since: it ran all the same
		{day(-3), "ran", nil},
		{day(-2), "skipped", "calendar"},
		{day(-1), "ran", nil},
		{day(0), "ran", nil},
		{day(1), "pending", "not_due"},
	} {
		r, ok := got[w.tick]
		if !ok {
			t.Errorf("no row for day %v", w.tick.Sub(m))
			continue
		}
		if r.Fate != w.fate || deref(r.Reason) != w.reason {
			t.Errorf("day %v: %s %v, want %v %v", w.tick.Sub(m), r.Fate, deref(r.Reason), w.fate, w.reason)
		}
	}
	if len(rows) != 7 {
		t.Errorf("%d rows, want 7", len(rows))
	}
	sums, err := svc.AuditSummary(t.Context(), day(-6), day(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 1 || sums[0].Skipped != 1 || sums[0].Lost != 0 || sums[0].Ran != 5 {
		t.Errorf("summary %+v, want 5 ran, 1 skipped, none lost", sums)
	}
	lost, err := svc.LostTicks(t.Context(), []string{id})
	if err != nil || len(lost) != 0 {
		t.Errorf("LostTicks = %v, %v; want none", lost, err)
	}
}
