package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
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

func forEachBackend(t *testing.T, f func(t *testing.T, st ops.Store)) { opstest.ForEach(t, f) }

func mustSpec(t *testing.T, expr string, loc *time.Location) cronspec.Spec {
	t.Helper()
	s, err := cronspec.Parse(expr, loc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func paris(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// defs are the schedules of the tests. Ids are unique per test, so the
// shared Redis and Postgres never mix two tests' state.
func defs(t *testing.T, prefix string) []scheduler.Schedule {
	return []scheduler.Schedule{
		{ID: prefix + "nightly", CronExpr: "0 3 * * *", Location: paris(t), Spec: mustSpec(t, "0 3 * * *", paris(t)), Hint: hints.RequireGlobal},
		{ID: prefix + "spread", CronExpr: "@hourly", Spec: mustSpec(t, "@hourly", time.UTC), Spread: 30 * time.Minute},
		{ID: prefix + "allow", CronExpr: "*/5 * * * *", Spec: mustSpec(t, "*/5 * * * *", time.UTC), Overlap: scheduler.OverlapAllow},
	}
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func uniq(t *testing.T) string { return strings.ReplaceAll(t.Name(), "/", ".") + "." }

func TestStatusAssemblesSchedulesNodesAndDrift(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st ops.Store) {
		ctx := t.Context()
		p := uniq(t)
		now := utc("2026-01-10T12:00:00Z")
		svc := ops.New(st, defs(t, p), ops.Options{Clock: func() time.Time { return now }})

		runs := []cluster.Run{
			{Schedule: p + "nightly", Tick: utc("2026-01-09T02:00:00Z"), Node: "a", Result: "success", StartedAt: utc("2026-01-09T02:00:01Z"), Duration: 1500 * time.Millisecond, Fence: 41, Attempts: 1, RunID: "r1"},
			{Schedule: p + "nightly", Tick: utc("2026-01-10T02:00:00Z"), Node: "b", Result: "failure", StartedAt: utc("2026-01-10T02:00:01Z"), Duration: 2 * time.Second, Fence: 42, Attempts: 3, Error: "exit status 1", RunID: "r2"},
		}
		if err := st.RecordRuns(ctx, runs, 10); err != nil {
			t.Fatal(err)
		}
		if err := st.SetPause(ctx, p+"spread", locking.Pause{Paused: true, Note: "incident", Until: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		hashes := ops.ScheduleHashes(defs(t, p), now)
		other := map[string]string{p + "nightly": "different", p + "spread": hashes[p+"spread"]}
		for _, n := range []cluster.Node{
			{NodeID: p + "n1", Version: "v1", StartedAt: now.Add(-time.Hour), ConfigHash: ops.ConfigHash(hashes), Schedules: hashes},
			{NodeID: p + "n2", Version: "v1", StartedAt: now.Add(-time.Hour), ConfigHash: ops.ConfigHash(hashes), Schedules: hashes},
			{NodeID: p + "n3", Version: "v2", StartedAt: now.Add(-time.Minute), ConfigHash: ops.ConfigHash(other), Schedules: other},
		} {
			if err := st.Announce(ctx, n, time.Minute); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Leave(context.Background(), n.NodeID) })
		}

		s, err := svc.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Schedules) != 3 {
			t.Fatalf("%d schedules", len(s.Schedules))
		}
		n := s.Schedules[0]
		if n.ID != p+"nightly" || n.Cron != "0 3 * * *" || n.Timezone != "Europe/Paris" || n.Hint != "require_global" || n.Paused {
			t.Errorf("nightly = %+v", n)
		}
		// 03:00 in Paris in January is 02:00 UTC.
		if n.NextTick == nil || !n.NextTick.Equal(utc("2026-01-11T02:00:00Z")) {
			t.Errorf("nightly next tick %v, want 2026-01-11T02:00:00Z", n.NextTick)
		}
		if n.LastRun == nil || n.LastRun.RunID != "r2" || n.LastRun.Node != "b" || n.LastRun.Result != "failure" {
			t.Errorf("nightly last run = %+v, want r2 (the newest)", n.LastRun)
		}
		sp := s.Schedules[1]
		off := cronspec.SpreadOffset(p+"spread", 30*time.Minute)
		if sp.NextTick == nil || !sp.NextTick.Equal(utc("2026-01-10T13:00:00Z").Add(off)) && !sp.NextTick.Equal(utc("2026-01-10T12:00:00Z").Add(off)) {
			t.Errorf("spread next tick %v, want the hour + offset %v", sp.NextTick, off)
		}
		if !sp.Paused || sp.Pause.Note != "incident" || !sp.Pause.Until.Equal(now.Add(time.Hour)) || sp.LastRun != nil {
			t.Errorf("spread = %+v, want paused with its note and end, no last run", sp)
		}
		if s.Schedules[2].Hint != string(hints.Default) {
			t.Errorf("a schedule without a hint shows %q", s.Schedules[2].Hint)
		}

		var mine []ops.Node
		for _, nd := range s.Nodes {
			if strings.HasPrefix(nd.NodeID, p) {
				mine = append(mine, nd)
			}
		}
		if len(mine) != 3 || mine[0].NodeID != p+"n1" || mine[2].Version != "v2" || mine[0].LastSeen.IsZero() {
			t.Fatalf("nodes = %+v", mine)
		}
		d := s.ConfigDrift
		if !d.Drifted || len(d.Schedules) != 2 {
			t.Fatalf("drift = %+v, want %s.nightly and %s.allow", d, p, p)
		}
		// allow is absent on n3; nightly differs there.
		if d.Schedules[0].ID != p+"allow" || d.Schedules[1].ID != p+"nightly" {
			t.Errorf("drifting ids %s, %s", d.Schedules[0].ID, d.Schedules[1].ID)
		}
		ni := d.Schedules[1]
		if len(ni.Sides) != 2 || !slices.Equal(ni.Sides[0].Nodes, []string{p + "n1", p + "n2"}) || !slices.Equal(ni.Sides[1].Nodes, []string{p + "n3"}) ||
			ni.Sides[0].Hash != hashes[p+"nightly"] || ni.Sides[1].Hash != "different" {
			t.Errorf("nightly sides = %+v", ni.Sides)
		}
		if al := d.Schedules[0]; al.Sides[1].Hash != "" || !slices.Equal(al.Sides[1].Nodes, []string{p + "n3"}) {
			t.Errorf("allow sides = %+v, want absent on n3", al.Sides)
		}
	})
}

// The JSON is the contract: every field present (null when empty), fence a
// number, duration_seconds, RFC 3339 times.
func TestJSONShape(t *testing.T) {
	now := utc("2026-01-10T12:00:00Z")
	next := now.Add(time.Hour)
	run := ops.Run{Schedule: "s", Tick: now, Node: "a", Result: "success", StartedAt: now, Duration: 1500 * time.Millisecond, Fence: 7, Attempts: 1, RunID: "r"}
	st := ops.Status{
		Schedules: []ops.Schedule{
			{ID: "s", Cron: "@hourly", Timezone: "UTC", Hint: "prefer_global", NextTick: &next, LastRun: &run, LastSuccess: &now},
			{ID: "t", Cron: "@hourly", Timezone: "UTC", Hint: "prefer_global"},
		},
		Nodes:       []ops.Node{{NodeID: "a", Version: "v", StartedAt: now, LastSeen: now, ConfigHash: "h"}},
		ConfigDrift: cluster.Drift(nil),
	}
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	keys := func(v any) []string {
		var out []string
		for k := range v.(map[string]any) {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	check := func(what string, got []string, want ...string) {
		t.Helper()
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s keys %v, want %v", what, got, want)
		}
	}
	check("status", keys(m), "schedules", "nodes", "config_drift")
	scheds := m["schedules"].([]any)
	schedKeys := []string{"id", "cron", "timezone", "hint", "paused", "next_tick", "last_run", "mark_ahead",
		"last_success", "failures_in_a_row", "running", "queued", "last_action"}
	check("schedule", keys(scheds[0]), schedKeys...)
	check("schedule without runs", keys(scheds[1]), schedKeys...)
	if s1 := scheds[1].(map[string]any); s1["last_run"] != nil || s1["next_tick"] != nil || s1["mark_ahead"] != nil ||
		s1["last_success"] != nil || s1["failures_in_a_row"] != float64(0) {
		t.Errorf("empty last_run/next_tick/last_success/failures_in_a_row = %v %v %v %v, want null and 0",
			s1["last_run"], s1["next_tick"], s1["last_success"], s1["failures_in_a_row"])
	}
	if s0 := scheds[0].(map[string]any); s0["last_success"] != "2026-01-10T12:00:00Z" || s0["failures_in_a_row"] != float64(0) {
		t.Errorf("last_success %v failures_in_a_row %v, want 2026-01-10T12:00:00Z and 0", s0["last_success"], s0["failures_in_a_row"])
	}

	lr := scheds[0].(map[string]any)["last_run"].(map[string]any)
	check("run", keys(lr), "schedule", "tick", "node", "result", "started_at", "duration_seconds", "fence", "manual", "attempts", "error", "run_id", "output_tail",
		"anomaly", "by")
	if lr["anomaly"] != nil || lr["by"] != nil {
		t.Errorf("a scheduled run's anomaly %v by %v, want null", lr["anomaly"], lr["by"])
	}
	if lr["fence"] != float64(7) || lr["duration_seconds"] != 1.5 || lr["tick"] != "2026-01-10T12:00:00Z" {
		t.Errorf("run fence %v duration %v tick %v", lr["fence"], lr["duration_seconds"], lr["tick"])
	}
	check("node", keys(m["nodes"].([]any)[0]), "node_id", "version", "started_at", "last_seen", "config_hash", "ready", "clock_offset_seconds")
	d := m["config_drift"].(map[string]any)
	if d["drifted"] != false || d["schedules"] == nil {
		t.Errorf("config_drift = %v, want drifted false and schedules []", d)
	}
	// An empty status still has its arrays, not nulls.
	raw, _ = json.Marshal(ops.Status{Schedules: []ops.Schedule{}, Nodes: []ops.Node{}, ConfigDrift: cluster.Drift(nil)})
	if string(raw) != `{"schedules":[],"nodes":[],"config_drift":{"drifted":false,"schedules":[]}}` {
		t.Errorf("empty status = %s", raw)
	}
}

func TestRuns(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st ops.Store) {
		ctx := t.Context()
		p := uniq(t)
		svc := ops.New(st, defs(t, p), ops.Options{})
		base := utc("2026-01-10T00:00:00Z")
		var runs []cluster.Run
		for i := range 5 {
			runs = append(runs, cluster.Run{Schedule: p + "allow", Tick: base.Add(time.Duration(i) * 5 * time.Minute), Node: []string{"a", "b", "c"}[i%3],
				Result: "success", StartedAt: base.Add(time.Duration(i)*5*time.Minute + time.Second), Duration: time.Second, Fence: int64(100 + i), Attempts: 1, RunID: "r" + string(rune('0'+i))})
		}
		if err := st.RecordRuns(ctx, runs, 100); err != nil {
			t.Fatal(err)
		}
		got, err := svc.Runs(ctx, p+"allow", 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[0].RunID != "r4" || got[1].RunID != "r3" || got[2].RunID != "r2" || got[0].Node != "b" || got[0].Fence != 104 {
			t.Errorf("runs = %+v, want r4 r3 r2, newest first", got)
		}
		if _, err := svc.Runs(ctx, p+"nope", 3); !errors.Is(err, ops.ErrUnknownSchedule) {
			t.Errorf("unknown schedule: %v", err)
		}
		for _, n := range []int{0, -1, ops.MaxRunsLimit + 1} {
			if _, err := svc.Runs(ctx, p+"allow", n); !errors.Is(err, ops.ErrInvalid) {
				t.Errorf("limit %d: %v, want ErrInvalid", n, err)
			}
		}
	})
}

// takeLoop plays a node picking up requests: it takes the head of id's
// queue until ctx ends, releasing the lock at once.
func takeLoop(ctx context.Context, st ops.Store, id, node string, taken chan<- cluster.Request) {
	for ctx.Err() == nil {
		tk, err := st.TakeRequest(ctx, cluster.TakeReq{Schedule: id, Node: node, TTL: time.Minute})
		if err == nil && tk.Handle != nil {
			_ = st.(locking.Locker).Release(context.WithoutCancel(ctx), tk.Handle)
			if tk.Request.Backfill {
				_ = st.Done(context.WithoutCancel(ctx), *tk.Request)
			}
			taken <- *tk.Request
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestTrigger(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st ops.Store) {
		ctx := t.Context()
		p := uniq(t)
		now := utc("2026-01-10T12:00:00Z")
		svc := ops.New(st, defs(t, p), ops.Options{Clock: func() time.Time { return now }, By: "test", Poll: 5 * time.Millisecond})

		t.Run("accepted", func(t *testing.T) {
			nctx, cancel := context.WithCancel(ctx)
			taken := make(chan cluster.Request, 1)
			done := make(chan struct{})
			go func() { defer close(done); takeLoop(nctx, st, p+"nightly", "node-b", taken) }()
			defer func() { cancel(); <-done }()
			ans, err := svc.Trigger(ctx, p+"nightly", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if ans != (ops.TriggerAnswer{Schedule: p + "nightly", Accepted: true, Node: "node-b"}) {
				t.Errorf("answer %+v", ans)
			}
			r := <-taken
			if r.Backfill || !r.Tick.Equal(now) || r.By != "test" || r.ID == "" {
				t.Errorf("request %+v", r)
			}
		})

		t.Run("nobody takes it", func(t *testing.T) {
			ans, err := svc.Trigger(ctx, p+"nightly", 20*time.Millisecond)
			if err != nil || ans.Accepted || ans.Node != "" {
				t.Fatalf("Trigger = %+v, %v; want not accepted", ans, err)
			}
			q, err := st.Requests(ctx, p+"nightly")
			if err != nil || len(q) != 1 {
				t.Fatalf("queue = %v, %v; want the request still queued", q, err)
			}
		})

		t.Run("running elsewhere under skip", func(t *testing.T) {
			h, err := st.(locking.Locker).TryLock(ctx, p+"spread", time.Minute)
			if err != nil || h == nil {
				t.Fatalf("TryLock: %v %v", h, err)
			}
			defer func() { _ = st.(locking.Locker).Release(context.WithoutCancel(ctx), h) }()
			if _, err := svc.Trigger(ctx, p+"spread", time.Second); !errors.Is(err, ops.ErrRunning) {
				t.Fatalf("Trigger while held = %v, want ErrRunning", err)
			}
			if q, _ := st.Requests(ctx, p+"spread"); len(q) != 0 {
				t.Errorf("a refused trigger queued %v", q)
			}
			// Under overlap = "allow" a held lock refuses nothing.
			h2, err := st.(locking.Locker).TryLock(ctx, p+"allow", time.Minute)
			if err != nil || h2 == nil {
				t.Fatalf("TryLock: %v %v", h2, err)
			}
			defer func() { _ = st.(locking.Locker).Release(context.WithoutCancel(ctx), h2) }()
			if ans, err := svc.Trigger(ctx, p+"allow", time.Millisecond); err != nil || ans.Accepted {
				t.Fatalf("Trigger of allow while held = %+v, %v; want queued", ans, err)
			}
		})

		if _, err := svc.Trigger(ctx, p+"nope", time.Millisecond); !errors.Is(err, ops.ErrUnknownSchedule) {
			t.Errorf("unknown: %v", err)
		}
	})
}

func TestPauseResume(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st ops.Store) {
		ctx := t.Context()
		p := uniq(t)
		now := time.Now().UTC().Truncate(time.Second)
		svc := ops.New(st, defs(t, p), ops.Options{Clock: func() time.Time { return now }})
		until := now.Add(2 * time.Hour)
		ans, err := svc.Pause(ctx, p+"nightly", ops.PauseRequest{Note: "db migration", Until: &until})
		if err != nil {
			t.Fatal(err)
		}
		if !ans.Paused || ans.Note != "db migration" || ans.Until == nil || !ans.Until.Equal(until) {
			t.Errorf("answer %+v", ans)
		}
		got, err := st.GetPause(ctx, p+"nightly")
		if err != nil || !got.Paused || got.Note != "db migration" || !got.Until.Equal(until) {
			t.Errorf("stored pause %+v, %v", got, err)
		}
		ss, err := svc.Schedules(ctx)
		if err != nil || !ss[0].Paused || ss[1].Paused {
			t.Errorf("schedules after pause: %+v %v", ss, err)
		}

		past := now.Add(-time.Minute)
		if _, err := svc.Pause(ctx, p+"spread", ops.PauseRequest{Until: &past}); !errors.Is(err, ops.ErrInvalid) {
			t.Errorf("pause until the past: %v, want ErrInvalid", err)
		}
		if _, err := svc.Pause(ctx, p+"nope", ops.PauseRequest{}); !errors.Is(err, ops.ErrUnknownSchedule) {
			t.Errorf("pause unknown: %v", err)
		}

		if ans, err := svc.Resume(ctx, p+"nightly"); err != nil || ans.Paused {
			t.Fatalf("Resume = %+v, %v", ans, err)
		}
		if got, err := st.GetPause(ctx, p+"nightly"); err != nil || got.Active(now) {
			t.Errorf("after resume: %+v, %v", got, err)
		}
	})
}

func TestBackfill(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st ops.Store) {
		ctx := t.Context()
		p := uniq(t)
		svc := ops.New(st, defs(t, p), ops.Options{By: "test"})
		// Every 5 minutes, both ends included.
		ans, err := svc.Backfill(ctx, p+"allow", utc("2026-01-10T00:00:00Z"), utc("2026-01-10T00:20:00Z"))
		if err != nil {
			t.Fatal(err)
		}
		want := []time.Time{utc("2026-01-10T00:00:00Z"), utc("2026-01-10T00:05:00Z"), utc("2026-01-10T00:10:00Z"), utc("2026-01-10T00:15:00Z"), utc("2026-01-10T00:20:00Z")}
		if !slices.EqualFunc(ans.Ticks, want, time.Time.Equal) {
			t.Errorf("ticks %v, want %v", ans.Ticks, want)
		}
		q, err := st.Requests(ctx, p+"allow")
		if err != nil || len(q) != 5 {
			t.Fatalf("queue %v, %v", q, err)
		}
		for i, r := range q {
			if !r.Backfill || !r.Tick.Equal(want[i]) || r.By != "test" {
				t.Errorf("request %d = %+v", i, r)
			}
		}
		if _, err := svc.Backfill(ctx, p+"allow", utc("2026-01-11T00:00:00Z"), utc("2026-01-11T00:20:00Z")); !errors.Is(err, ops.ErrBusy) {
			t.Errorf("second backfill: %v, want ErrBusy", err)
		}
		// Spread moves the ticks backfilled as it moves the regular ones.
		off := cronspec.SpreadOffset(p+"spread", 30*time.Minute)
		ans, err = svc.Backfill(ctx, p+"spread", utc("2026-01-10T00:00:00Z"), utc("2026-01-10T02:00:00Z"))
		if err != nil || len(ans.Ticks) == 0 || !ans.Ticks[0].Equal(utc("2026-01-10T00:00:00Z").Add(off)) {
			t.Errorf("spread backfill %v, %v; want ticks at the hour + %v", ans.Ticks, err, off)
		}

		for name, r := range map[string][2]time.Time{
			"reversed":       {utc("2026-01-10T00:20:00Z"), utc("2026-01-10T00:00:00Z")},
			"no tick":        {utc("2026-01-10T00:01:00Z"), utc("2026-01-10T00:04:00Z")},
			"missing an end": {{}, utc("2026-01-10T00:04:00Z")},
		} {
			if _, err := svc.Backfill(ctx, p+"nightly", r[0], r[1]); !errors.Is(err, ops.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		// Exactly 1,000 ticks pass; one more is refused.
		d := scheduler.Schedule{ID: "x", Spec: mustSpec(t, "*/5 * * * *", time.UTC)}
		from := utc("2026-01-01T00:00:00Z")
		if ticks, err := ops.BackfillTicks(d, from, from.Add(999*5*time.Minute)); err != nil || len(ticks) != 1000 {
			t.Errorf("1,000 ticks: %d, %v", len(ticks), err)
		}
		if _, err := ops.BackfillTicks(d, from, from.Add(1000*5*time.Minute)); !errors.Is(err, ops.ErrInvalid) || !strings.Contains(err.Error(), "more than 1000") {
			t.Errorf("1,001 ticks: %v", err)
		}
	})
}

func TestNoBackend(t *testing.T) {
	ctx := t.Context()
	svc := ops.New(nil, defs(t, ""), ops.Options{})
	st, err := svc.Status(ctx)
	if err != nil || len(st.Schedules) != 3 || st.Schedules[0].NextTick == nil || len(st.Nodes) != 0 || st.ConfigDrift.Drifted {
		t.Errorf("Status without a backend = %+v, %v", st, err)
	}
	if _, err := svc.Trigger(ctx, "nightly", time.Second); !errors.Is(err, ops.ErrNoBackend) {
		t.Errorf("trigger: %v", err)
	}
	if _, err := svc.Runs(ctx, "nightly", 1); !errors.Is(err, ops.ErrNoBackend) {
		t.Errorf("runs: %v", err)
	}
}

// A tick mark raised far ahead of the clock (a bug, or anyone who can write
// the backend) stops its schedule until that time, with nothing but
// contended skips at debug level: status names it, with the time the mark
// says. A mark at the clock is not flagged, nor a node_local schedule's
// (it takes no lock, so no mark stops it).
func TestStatusFlagsAMarkAheadOfTheClock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st ops.Store) {
		ctx := t.Context()
		p := uniq(t)
		lk, ok := st.(interface {
			TryLockTick(context.Context, locking.TickRequest) (locking.TickAnswer, error)
		})
		if !ok {
			t.Fatalf("%T cannot take a tick", st)
		}
		now := time.Now()
		ahead := now.Add(10 * 365 * 24 * time.Hour).Truncate(time.Second)
		for key, at := range map[string]time.Time{p + "ahead": ahead, p + "now": now.Truncate(time.Millisecond), p + "local": ahead} {
			// A request whose max skew reaches the future tick is granted
			// it: what a broken or hostile writer does.
			ans, err := lk.TryLockTick(ctx, locking.TickRequest{Key: key, Tick: at, TTL: time.Minute,
				MaxSkew: at.Sub(now) + time.Hour, Window: time.Minute})
			if err != nil || ans.Verdict != locking.TickGranted {
				t.Fatalf("raising %s's mark: %v, %v", key, ans.Verdict, err)
			}
		}
		scheds := []scheduler.Schedule{
			{ID: p + "ahead", CronExpr: "* * * * *", Spec: mustSpec(t, "* * * * *", time.UTC), Hint: hints.RequireGlobal},
			{ID: p + "now", CronExpr: "* * * * *", Spec: mustSpec(t, "* * * * *", time.UTC), Hint: hints.RequireGlobal},
			{ID: p + "local", CronExpr: "* * * * *", Spec: mustSpec(t, "* * * * *", time.UTC), Hint: hints.NodeLocal},
		}
		s, err := ops.New(st, scheds, ops.Options{}).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Schedules[0].MarkAhead; got == nil || !got.Equal(ahead) || got.Location() != time.UTC {
			t.Errorf("a mark %v ahead: mark_ahead %v, want %v in UTC", ahead.Sub(now), got, ahead.UTC())
		}
		for _, sc := range s.Schedules[1:] {
			if sc.MarkAhead != nil {
				t.Errorf("%s: mark_ahead %v, want null", sc.ID, sc.MarkAhead)
			}
		}
		b, err := json.Marshal(s.Schedules[1])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"mark_ahead":null`) {
			t.Errorf("status JSON %s: mark_ahead not present as null", b)
		}

		// Asked from a host whose clock runs an hour behind: the mark
		// raised at the backend's now is not ahead of the backend, which
		// a live node's announcement (stamped by the backend) tells.
		if err := st.Announce(ctx, cluster.Node{NodeID: p + "n", StartedAt: now}, time.Minute); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Leave(context.Background(), p+"n") })
		behind := func() time.Time { return time.Now().Add(-time.Hour) }
		for what, list := range map[string]func() ([]ops.Schedule, error){
			"status": func() ([]ops.Schedule, error) {
				s, err := ops.New(st, scheds, ops.Options{Clock: behind}).Status(ctx)
				return s.Schedules, err
			},
			"schedules": func() ([]ops.Schedule, error) { return ops.New(st, scheds, ops.Options{Clock: behind}).Schedules(ctx) },
		} {
			got, err := list()
			if err != nil {
				t.Fatal(err)
			}
			if got[0].MarkAhead == nil || got[1].MarkAhead != nil {
				t.Errorf("%s from a clock an hour behind: mark_ahead %v and %v, want the far one only", what, got[0].MarkAhead, got[1].MarkAhead)
			}
		}
	})
}

// A schedule's last run is the newest that ended, not the provisional
// record of a run still going; with none ended, the running one.
func TestStatusLastRunIsTheNewestEnded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st ops.Store) {
		ctx := t.Context()
		p := uniq(t)
		now := utc("2026-01-10T12:00:00Z")
		svc := ops.New(st, defs(t, p), ops.Options{Clock: func() time.Time { return now }})
		runs := []cluster.Run{
			{Schedule: p + "nightly", Tick: utc("2026-01-09T02:00:00Z"), Node: "a", Result: "success", StartedAt: utc("2026-01-09T02:00:01Z"), Attempts: 1, RunID: "r1"},
			{Schedule: p + "nightly", Tick: utc("2026-01-10T02:00:00Z"), Node: "b", Result: cluster.ResultRunning, StartedAt: utc("2026-01-10T02:00:01Z"), RunID: "r2"},
			{Schedule: p + "spread", Tick: utc("2026-01-10T02:00:00Z"), Node: "b", Result: cluster.ResultRunning, StartedAt: utc("2026-01-10T02:00:01Z"), RunID: "s1"},
		}
		if err := st.RecordRuns(ctx, runs, 10); err != nil {
			t.Fatal(err)
		}
		scheds, err := svc.Schedules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range scheds {
			switch sc.ID {
			case p + "nightly":
				if sc.LastRun == nil || sc.LastRun.RunID != "r1" {
					t.Errorf("nightly's last run %+v, want r1 (r2 still runs)", sc.LastRun)
				}
			case p + "spread":
				if sc.LastRun == nil || sc.LastRun.RunID != "s1" || sc.LastRun.Result != cluster.ResultRunning {
					t.Errorf("spread's last run %+v, want s1 running (none ended)", sc.LastRun)
				}
			}
		}
	})
}
