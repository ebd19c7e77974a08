package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// A schedule's page marks the runs its node found too fast or overrun,
// draws expected_runtime and min_runtime across the duration chart, and
// says its last success and its failures in a row.
func TestPageMarksAnomaliesAndRuntimeBounds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := opstest.Memory(t)
	spec, err := cronspec.Parse("*/5 * * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	defs := []scheduler.Schedule{{ID: "job", CronExpr: "*/5 * * * *", Spec: spec,
		ExpectedRuntime: 3 * time.Second, MinRuntime: time.Second}}
	// Oldest first: too fast, fine, then two overrunning failures.
	var runs []cluster.Run
	for i, r := range []struct {
		d       time.Duration
		result  string
		anomaly string
	}{
		{500 * time.Millisecond, "success", cluster.AnomalyTooFast},
		{2 * time.Second, "success", ""},
		{4 * time.Second, "failure", cluster.AnomalyOverrun},
		{4 * time.Second, "failure", cluster.AnomalyOverrun},
	} {
		at := now.Add(time.Duration(i-4) * 5 * time.Minute)
		runs = append(runs, cluster.Run{Schedule: "job", Tick: at, StartedAt: at, Node: "node-a", Result: r.result,
			Duration: r.d, Attempts: 1, RunID: "run-" + string(rune('a'+i)), Anomaly: r.anomaly})
	}
	if err := st.RecordRuns(context.Background(), runs, cluster.DefaultKeep); err != nil {
		t.Fatal(err)
	}
	svc := ops.New(st, defs, ops.Options{Clock: func() time.Time { return now }})
	s := New("127.0.0.1:0", nil, nil, slog.New(slog.DiscardHandler), WithAPI(APIConfig{Ops: svc, Token: writeTok}))
	f := &pageFixture{h: s.srv.Handler, st: st, now: now}
	b := body(t, f.get(t, "/schedules/job"))
	for _, want := range []string{
		`<span class="res good">success</span> <span class="tag warn anomaly" title="a success faster than its min_runtime">too_fast</span>`,
		`<span class="res bad">failure</span> <span class="tag warn anomaly" title="longer than its expected_runtime">overrun</span>`,
		// The scale tops at 4s: expected_runtime 3s at a quarter from the
		// top, min_runtime 1s at three quarters.
		`<line class="limit expected" x1="0" x2="600" y1="30" y2="30"><title>expected_runtime 3.0s</title></line>`,
		`<line class="limit min" x1="0" x2="600" y1="90" y2="90"><title>min_runtime 1.0s</title></line>`,
		`<dd class="last-success"><time datetime="` + runs[1].Tick.Format(time.RFC3339) + `">`,
		`<dd class="streak"><span class="tag bad">2</span></dd>`,
	} {
		if !strings.Contains(b, want) {
			t.Errorf("GET /schedules/job lacks %s", want)
		}
	}
	if n := strings.Count(b, `class="tag warn anomaly"`); n != 3 {
		t.Errorf("%d runs marked as anomalies, want 3:\n%s", n, b)
	}
	// The list: the last run's anomaly, the streak and the last success.
	list := body(t, f.get(t, "/"))
	for _, want := range []string{
		`<span class="res bad">failure</span> <span class="tag warn anomaly last">overrun</span> on <span class="node">node-a</span>`,
		`<span class="tag bad streak" title="failed runs in a row since the last success or resume">2 failed in a row</span>`,
		`<div class="last-success">last success <time datetime="` + runs[1].Tick.Format(time.RFC3339) + `">`,
	} {
		if !strings.Contains(list, want) {
			t.Errorf("GET / lacks %s", want)
		}
	}
}

// expected_runtime far above every run is named, not drawn: a line there
// would squash the bars to the floor.
func TestChartExpectedRuntimeAboveTheRuns(t *testing.T) {
	t.Parallel()
	c := durationChart([]ops.Run{{Duration: time.Second}}, time.Minute, 0)
	if len(c.Lines) != 0 || c.Above != "1m" || c.Max != "1.0s" {
		t.Errorf("chart lines %+v above %q max %q, want no line, expected_runtime 1m above, top 1.0s", c.Lines, c.Above, c.Max)
	}
}
