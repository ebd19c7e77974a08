package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/internal/server"
	"github.com/bext-dev/bext-scheduler/internal/service"
	"github.com/bext-dev/bext-scheduler/locking"
)

// auditAPI serves the API over a memory store the test fills, as a node
// would: the CLI, configured with backend = "memory", asks it. job gets a
// lost tick (returned) between two runs; many only runs.
func auditAPI(t *testing.T) (cfg string, lost time.Time) {
	t.Helper()
	st := opstest.Memory(t)
	m := time.Now().UTC().Truncate(5 * time.Minute)
	var runs []cluster.Run
	for _, id := range []string{"job", "many"} {
		for _, k := range []int{-15, -10, -5} {
			if id == "job" && k == -10 {
				continue
			}
			tick := m.Add(time.Duration(k) * time.Minute)
			runs = append(runs, cluster.Run{Schedule: id, Tick: tick, Node: "n1", Result: "success", StartedAt: tick.Add(time.Second), Attempts: 1, RunID: fmt.Sprint(id, k)})
		}
		lk := st.(interface {
			TryLockTick(context.Context, locking.TickRequest) (locking.TickAnswer, error)
		})
		if ans, err := lk.TryLockTick(t.Context(), locking.TickRequest{Key: id, Tick: m.Add(-5 * time.Minute), TTL: time.Minute, MaxSkew: time.Hour, Window: time.Hour, PerTick: id == "many"}); err != nil || ans.Verdict != locking.TickGranted {
			t.Fatal(ans.Verdict, err)
		}
	}
	if err := st.RecordRuns(t.Context(), runs, 100); err != nil {
		t.Fatal(err)
	}
	return serveAudit(t, st, opsSchedules), m.Add(-10 * time.Minute)
}

// serveAudit serves the API over st for schedules (TOML [[scheduled]]
// tables), as a node would, and returns the CLI's config to ask it.
func serveAudit(t *testing.T, st ops.Store, schedules string) (cfg string) {
	t.Helper()
	c, err := config.Parse([]byte("[locking]\nbackend = \"memory\"\n"+schedules), "audit.toml")
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := ops.New(st, service.Schedules(c, quiet, nil), ops.Options{})
	s := server.New("127.0.0.1:0", nil, nil, quiet, server.WithAPI(server.APIConfig{Ops: svc}))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return writeFile(t, t.TempDir(), "bext.config.toml", fmt.Sprintf("node_id = \"cli\"\n[http]\nlisten = %q\n[locking]\nbackend = \"memory\"\n%s", s.Addr(), schedules))
}

// TestAuditCommandShowsCalendarSkips: a tick on an except date is listed,
// skipped by the calendar, and lost by no one.
func TestAuditCommandShowsCalendarSkips(t *testing.T) {
	st := opstest.Memory(t)
	m := time.Now().UTC().Truncate(time.Minute)
	day := func(k int) time.Time { return m.Add(time.Duration(k) * 24 * time.Hour) }
	var runs []cluster.Run
	for _, k := range []int{-3, -2, 0} {
		runs = append(runs, cluster.Run{Schedule: "nightly", Tick: day(k), Node: "n1", Result: "success", StartedAt: day(k), Attempts: 1, RunID: fmt.Sprint("r", k)})
	}
	if err := st.RecordRuns(t.Context(), runs, 100); err != nil {
		t.Fatal(err)
	}
	lk := st.(interface {
		TryLockTick(context.Context, locking.TickRequest) (locking.TickAnswer, error)
	})
	if ans, err := lk.TryLockTick(t.Context(), locking.TickRequest{Key: "nightly", Tick: day(0), TTL: time.Minute, MaxSkew: time.Hour, Window: time.Hour}); err != nil || ans.Verdict != locking.TickGranted {
		t.Fatal(ans.Verdict, err)
	}
	cfg := serveAudit(t, st, fmt.Sprintf(`
[[scheduled]]
id = "nightly"
cron = "%d %d * * *"
except = [%q]
command = ["true"]
`, m.Minute(), m.Hour(), day(-1).Format(time.DateOnly)))

	r := cli(t, cfg, 0, "audit", "nightly", "--from", day(-4).Add(time.Minute).Format(time.RFC3339))
	var line string
	for l := range strings.Lines(r.Stdout) {
		if strings.HasPrefix(l, fmtTime(day(-1))) {
			line = l
		}
	}
	if f := strings.Fields(line); len(f) < 3 || f[1] != "skipped" || f[2] != "calendar" {
		t.Errorf("audit: the excepted day's row %q, want skipped, calendar:\n%s", line, r.Stdout)
	}
	if !strings.Contains(r.Stdout, "4 ticks") {
		t.Errorf("audit: want 4 ticks, the excepted one among them:\n%s", r.Stdout)
	}
	r = cli(t, cfg, 0, "audit", "--json", "--from", day(-4).Add(time.Minute).Format(time.RFC3339))
	var sums []ops.AuditSummary
	if err := json.Unmarshal([]byte(r.Stdout), &sums); err != nil || len(sums) != 1 || sums[0].Skipped != 1 || sums[0].Ran != 3 || sums[0].Lost != 0 {
		t.Errorf("audit --json summary (%v): %s", err, r.Stdout)
	}
}

// TestAuditCommand: audit exits 1 when a tick of the range is lost, 0 when
// none is, 2 on a bad time or an unknown schedule; --json is the API's
// rows.
func TestAuditCommand(t *testing.T) {
	t.Parallel()
	cfg, lost := auditAPI(t)
	r := cli(t, cfg, exitFailure, "audit", "job")
	if !strings.Contains(r.Stdout, fmtTime(lost)+"  LOST !!") || !strings.Contains(r.Stderr, "1 ticks lost") {
		t.Errorf("audit job: want %s marked lost\nstdout:\n%s\nstderr:\n%s", fmtTime(lost), r.Stdout, r.Stderr)
	}
	// many has no lost tick; neither has job after its lost one.
	cli(t, cfg, 0, "audit", "many")
	cli(t, cfg, 0, "audit", "job", "--from", lost.Format(time.RFC3339))
	cli(t, cfg, 0, "audit", "job", "--from", "2m")

	r = cli(t, cfg, exitFailure, "audit", "job", "--json", "--from", lost.Add(-time.Minute).Format(time.RFC3339), "--to", lost.Add(time.Minute).Format(time.RFC3339))
	var rows []map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil {
		t.Fatalf("audit --json: %v\n%s", err, r.Stdout)
	}
	want := map[string]any{"schedule": "job", "tick": lost.Format(time.RFC3339), "fate": "lost", "reason": nil, "node": nil, "run_id": nil,
		"fence": nil, "lateness_seconds": nil, "duration_seconds": nil, "result": nil, "attempts": nil, "manual": nil, "note": nil, "mark_ahead": nil}
	if len(rows) != 1 || fmt.Sprint(rows[0]) != fmt.Sprint(want) {
		t.Errorf("audit --json: %s, want one row %v", r.Stdout, want)
	}

	r = cli(t, cfg, exitFailure, "audit")
	lines := strings.Split(r.Stdout, "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[1], "job ") || !strings.Contains(lines[1], "LOST") || !strings.HasPrefix(lines[2], "many ") {
		t.Errorf("audit summary: want job first, marked lost:\n%s", r.Stdout)
	}
	r = cli(t, cfg, exitFailure, "audit", "--json")
	var sums []ops.AuditSummary
	if err := json.Unmarshal([]byte(r.Stdout), &sums); err != nil || len(sums) != 2 || sums[0].Schedule != "job" || sums[0].Lost != 1 || sums[1].Lost != 0 || sums[1].Ran != 3 {
		t.Errorf("audit --json summary (%v): %s", err, r.Stdout)
	}
	cli(t, cfg, 0, "audit", "--from", lost.Format(time.RFC3339))

	for _, args := range [][]string{
		{"audit", "nope"},
		{"audit", "job", "--from", "yesterday"},
		{"audit", "job", "--to", "2026-13-01T00:00:00Z"},
		{"audit", "job", "--from", "1h", "--to", "2h"},
		{"audit", "job", "many"},
		{"audit", "job", "--from", "2000-01-01T00:00:00Z"},
	} {
		r := cli(t, cfg, exitUsage, args...)
		if strings.TrimSpace(r.Stderr) == "" {
			t.Errorf("%v: exit 2 without a message", args)
		}
	}
}

// TestPrintAuditMarksLostAndMarkAhead: the table marks a lost row and,
// with the mark ahead, says when the next tick can run.
func TestPrintAuditMarksLostAndMarkAhead(t *testing.T) {
	t.Parallel()
	tick := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	ahead := tick.Add(48 * time.Hour)
	var b strings.Builder
	rows := []ops.AuditTick{{Schedule: "job", Tick: tick, Fate: ops.FateLost, MarkAhead: &ahead}}
	if err := printAudit(&b, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2026-01-02T03:00:00Z  LOST !!", "MARK AHEAD: job: its tick mark says 2026-01-04T03:00:00Z", "no tick will run before 2026-01-04T03:00:00Z", "1 ticks: 1 lost"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("audit table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	rows[0].MarkAhead, rows[0].Fate = nil, ops.FateRan
	if err := printAudit(&b, rows); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "MARK AHEAD") || strings.Contains(b.String(), "LOST") {
		t.Errorf("a ran tick without a mark ahead:\n%s", b.String())
	}
}
