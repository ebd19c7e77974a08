package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// lostTick gives st's schedule p+"job" (*/5) a lost tick: runs 15 and 5
// minutes before the current five, the mark at the later, nothing at the
// one between. It returns that tick.
func lostTick(t *testing.T, st ops.Store, p string) time.Time {
	t.Helper()
	m := time.Now().UTC().Truncate(5 * time.Minute)
	id := p + "job"
	runs := []cluster.Run{
		{Schedule: id, Tick: m.Add(-15 * time.Minute), Node: "n1", Result: "success", StartedAt: m.Add(-15 * time.Minute), Attempts: 1, RunID: "r15"},
		{Schedule: id, Tick: m.Add(-5 * time.Minute), Node: "n1", Result: "success", StartedAt: m.Add(-5 * time.Minute), Attempts: 1, RunID: "r5"},
	}
	if err := st.RecordRuns(t.Context(), runs, 100); err != nil {
		t.Fatal(err)
	}
	lk := st.(interface {
		TryLockTick(context.Context, locking.TickRequest) (locking.TickAnswer, error)
	})
	if ans, err := lk.TryLockTick(t.Context(), locking.TickRequest{Key: id, Tick: m.Add(-5 * time.Minute), TTL: time.Minute, MaxSkew: time.Hour, Window: time.Hour}); err != nil || ans.Verdict != locking.TickGranted {
		t.Fatal(ans.Verdict, err)
	}
	return m.Add(-10 * time.Minute)
}

func TestAPIAudit(t *testing.T) {
	st := opstest.Memory(t)
	p := prefix(t)
	lost := lostTick(t, st, p)
	a := startAPI(t, st, p, writeTok, "")
	job := url.PathEscape(p + "job")
	from := url.QueryEscape(lost.Add(-10 * time.Minute).Format(time.RFC3339))
	to := url.QueryEscape(lost.Add(5 * time.Minute).Format(time.RFC3339))

	code, body := call(t, "GET", a.base+"/api/v1/schedules/"+job+"/audit?from="+from+"&to="+to, "", "")
	if code != 200 {
		t.Fatalf("audit: %d %s", code, body)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(body), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[1]["fate"] != "lost" || rows[1]["tick"] != lost.Format(time.RFC3339) || rows[0]["fate"] != "ran" || rows[2]["fate"] != "ran" {
		t.Errorf("audit of (%s, %s]: %s, want ran, lost at %s, ran", from, to, body, lost)
	}
	for _, k := range []string{"schedule", "tick", "fate", "reason", "node", "run_id", "fence", "lateness_seconds", "duration_seconds", "result", "attempts", "manual", "note", "mark_ahead"} {
		if _, ok := rows[1][k]; !ok {
			t.Errorf("row without %s: %v", k, rows[1])
		}
	}

	code, body = call(t, "GET", a.base+"/api/v1/audit?from="+from+"&to="+to, "", "")
	var sums []ops.AuditSummary
	if code != 200 || json.Unmarshal([]byte(body), &sums) != nil || len(sums) != 2 || sums[0].Schedule != p+"job" || sums[0].Lost != 1 || sums[0].Ran != 2 {
		t.Errorf("summary: %d %s, want %sjob first with 1 lost and 2 ran", code, body, p)
	}

	for path, want := range map[string]int{
		"/api/v1/schedules/" + job + "/audit?from=yesterday":                     400,
		"/api/v1/schedules/" + job + "/audit?from=" + to + "&to=" + from:         400,
		"/api/v1/schedules/nope/audit":                                           404,
		"/api/v1/audit?to=2026-13-01T00:00:00Z":                                  400,
		"/api/v1/schedules/" + job + "/audit?from=2000-01-01T00:00:00Z&to=" + to: 400, // too many ticks
	} {
		if code, body := call(t, "GET", a.base+path, "", ""); code != want {
			t.Errorf("GET %s: %d, want %d: %s", path, code, want, body)
		} else if !strings.Contains(body, `"error"`) {
			t.Errorf("GET %s: %s, want an error answer", path, body)
		}
	}

	// The CLI's client reads the same answers.
	c, err := ops.NewClient(strings.TrimPrefix(a.base, "http://"), writeTok, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Audit(t.Context(), p+"job", lost.Add(-10*time.Minute), lost.Add(5*time.Minute))
	if err != nil || len(got) != 3 || got[1].Fate != ops.FateLost || !got[1].Tick.Equal(lost) {
		t.Errorf("client audit: %+v, %v", got, err)
	}
	if _, err := c.Audit(t.Context(), "nope", time.Time{}, time.Time{}); !errors.Is(err, ops.ErrUnknownSchedule) {
		t.Errorf("client audit of an unknown schedule: %v", err)
	}
	if s, err := c.AuditSummary(t.Context(), time.Time{}, time.Time{}); err != nil || len(s) != 2 || s[0].Lost != 1 {
		t.Errorf("client summary: %+v, %v", s, err)
	}
}

// TestPageShowsLostTicks: the detail page's strip shows a lost tick as a
// red cell titled with its tick and fate; the list page tags the schedule.
func TestPageShowsLostTicks(t *testing.T) {
	st := opstest.Memory(t)
	lost := lostTick(t, st, "")
	spec, err := cronspec.Parse("*/5 * * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	defs := []scheduler.Schedule{{ID: "job", CronExpr: "*/5 * * * *", Spec: spec}, {ID: "fine", CronExpr: "*/5 * * * *", Spec: spec}}
	s := New("127.0.0.1:0", nil, nil, slog.New(slog.DiscardHandler), WithAPI(APIConfig{Ops: ops.New(st, defs, ops.Options{})}))
	f := &pageFixture{h: s.srv.Handler, st: st}

	b := body(t, f.get(t, "/schedules/job"))
	cell := `<span class="tick f-lost" title="` + lost.Format(time.RFC3339) + ` lost"></span>`
	if !strings.Contains(b, cell) {
		t.Errorf("the detail page lacks %s:\n%s", cell, b)
	}
	if n := strings.Count(b, `<span class="tick f-`); n != ops.AuditDefaultTicks {
		t.Errorf("%d tick cells, want %d", n, ops.AuditDefaultTicks)
	}
	if n := strings.Count(b, `<span class="tick f-lost"`); n != 1 {
		t.Errorf("%d lost cells, want 1", n)
	}
	css := body(t, f.get(t, "/assets/page.css"))
	if !strings.Contains(css, ".tick.f-lost { background: var(--bad); }") || !strings.Contains(css, "--bad: #") {
		t.Errorf("a lost cell is not red:\n%s", css)
	}
	if b := body(t, f.get(t, "/schedules/fine")); strings.Contains(b, `f-lost`) {
		t.Errorf("fine's strip shows a lost tick")
	}

	b = body(t, f.get(t, "/"))
	for _, want := range []string{`<span class="tag bad">1 lost ticks</span>`, `<a href="/schedules/job">job</a> <span class="tag bad lost"`, `>1 lost</span>`} {
		if !strings.Contains(b, want) {
			t.Errorf("GET / lacks %s", want)
		}
	}
	if strings.Contains(b, `<a href="/schedules/fine">fine</a> <span class="tag bad lost"`) {
		t.Errorf("GET / tags fine as lost")
	}
}
