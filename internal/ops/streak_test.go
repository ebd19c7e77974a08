package ops_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/ops"
)

// streakRuns builds a history, newest first, from results oldest first:
// run i started at minute i.
func streakRuns(results ...string) []cluster.Run {
	base := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	runs := make([]cluster.Run, len(results))
	for i, res := range results {
		at := base.Add(time.Duration(i) * time.Minute)
		runs[len(results)-1-i] = cluster.Run{Schedule: "s", Tick: at, StartedAt: at, Result: res, RunID: fmt.Sprint(i)}
	}
	return runs
}

func TestFailureStreak(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		results []string // oldest first
		since   time.Time
		want    int
	}{
		{"empty history", nil, time.Time{}, 0},
		{"newest succeeded", []string{"failure", "success"}, time.Time{}, 0},
		{"failures since the last success", []string{"failure", "success", "failure", "timeout", "failure"}, time.Time{}, 3},
		{"never succeeded", []string{"failure", "failure"}, time.Time{}, 2},
		{"running and not_run pass over", []string{"success", "failure", "not_run", "failure", "running"}, time.Time{}, 2},
		{"lock_lost ends it", []string{"failure", "lock_lost", "failure"}, time.Time{}, 1},
		{"cancelled ends it", []string{"failure", "cancelled", "failure", "failure"}, time.Time{}, 2},
		// Runs 0..4; since minute 2: runs 3 and 4 only.
		{"only runs started after since", []string{"failure", "failure", "failure", "failure", "failure"}, base.Add(2 * time.Minute), 2},
		{"since after every run", []string{"failure"}, base.Add(time.Hour), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := ops.FailureStreak(streakRuns(c.results...), c.since); got != c.want {
				t.Errorf("FailureStreak(%v, %v) = %d, want %d", c.results, c.since, got, c.want)
			}
		})
	}
}

// Status gives each schedule the tick of its newest success and the
// failures since, on every backend: from the newest runs when one of them
// succeeded, from the whole history when none of the newest did.
func TestStatusLastSuccessAndFailuresInARow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st ops.Store) {
		ctx := t.Context()
		p := uniq(t)
		now := utc("2026-01-10T12:00:00Z")
		svc := ops.New(st, defs(t, p), ops.Options{Clock: func() time.Time { return now }})
		var runs []cluster.Run
		add := func(id string, results ...string) {
			for _, r := range streakRuns(results...) {
				r.Schedule, r.RunID, r.Attempts = p+id, p+id+r.RunID, 1
				if r.Result == cluster.ResultRunning {
					r.Attempts = 0
				}
				runs = append(runs, r)
			}
		}
		// nightly: a success, then 12 failures and a run still going (more
		// than the 8 newest runs status reads first).
		add("nightly", append(append([]string{"failure", "success"}, repeat("failure", 12)...), "running")...)
		add("spread", "failure", "success") // healthy
		// allow: no run at all.
		if err := st.RecordRuns(ctx, runs, 100); err != nil {
			t.Fatal(err)
		}
		// spread was resumed after its failure: nothing before counts.
		// nightly was resumed before its last three failures: they are
		// its streak, not all twelve.
		// Their resumes' At are a day ahead (a CLI's clock): StreakFrom,
		// the newest run's start when resumed, is what counts.
		for id, from := range map[string]string{"nightly": "2026-01-10T00:10:00Z", "spread": "2026-01-10T00:00:00Z"} {
			f := utc(from)
			a := cluster.Action{Schedule: p + id, Kind: cluster.ActionResume, By: "ops@host", At: now.Add(24 * time.Hour), StreakFrom: &f}
			if err := st.RecordAction(ctx, a, 10); err != nil {
				t.Fatal(err)
			}
		}
		status, err := svc.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		base := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
		want := map[string]struct {
			last   *time.Time
			streak int
		}{
			p + "nightly": {timePtr(base.Add(time.Minute)), 3},
			p + "spread":  {timePtr(base.Add(time.Minute)), 0},
			p + "allow":   {nil, 0},
		}
		for _, sc := range status.Schedules {
			w := want[sc.ID]
			if !sameTime(sc.LastSuccess, w.last) || sc.FailuresInARow != w.streak {
				t.Errorf("%s: last_success %v failures_in_a_row %d, want %v and %d", sc.ID, sc.LastSuccess, sc.FailuresInARow, w.last, w.streak)
			}
		}
	})
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func timePtr(t time.Time) *time.Time { return &t }

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// Resume records, as the start of the new failure streak, the start of
// the newest run history holds then (null with no run), as stored; the
// JSON carries it as streak_from.
func TestResumeRecordsStreakFrom(t *testing.T) {
	forEachBackend(t, func(t *testing.T, st ops.Store) {
		ctx := t.Context()
		p := uniq(t)
		now := utc("2026-01-10T12:00:00Z")
		svc := ops.New(st, defs(t, p), ops.Options{Clock: func() time.Time { return now }})
		if _, err := svc.Resume(ctx, p+"spread"); err != nil {
			t.Fatal(err)
		}
		runs := streakRuns("failure", "failure")
		for i := range runs {
			runs[i].Schedule, runs[i].RunID, runs[i].Attempts = p+"nightly", p+runs[i].RunID, 1
		}
		if err := st.RecordRuns(ctx, runs, 10); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Resume(ctx, p+"nightly"); err != nil {
			t.Fatal(err)
		}
		status, err := svc.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range status.Schedules {
			la := sc.LastAction
			switch sc.ID {
			case p + "nightly":
				if la == nil || la.StreakFrom == nil || !la.StreakFrom.Equal(runs[0].StartedAt) || sc.FailuresInARow != 0 {
					t.Errorf("nightly after its resume: last action %+v, failures in a row %d; want streak_from %v and 0",
						la, sc.FailuresInARow, runs[0].StartedAt)
				}
			case p + "spread":
				if la == nil || la.Kind != cluster.ActionResume || la.StreakFrom != nil {
					t.Errorf("spread resumed with no run: last action %+v, want a resume with streak_from null", la)
				}
			}
		}
	})
}
