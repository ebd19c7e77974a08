package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// A triggered run's records, the provisional one and the final, name who
// asked for it (the request's By), and its final record the node's verdict
// on its duration (too fast for its min_runtime here).
func TestTriggeredRunRecordsBy(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	mem := memory.New(memory.WithHolder("a"))
	started := make(chan struct{})
	release := make(chan struct{})
	job := scheduler.JobFunc(func(context.Context, scheduler.Tick) error {
		close(started)
		<-release
		return nil
	})
	var s *scheduler.Scheduler
	ag := agent.New(mem, schedRunner{&s}, agent.Options{NodeID: "a", PollEvery: 20 * time.Millisecond, FlushEvery: time.Millisecond})
	ag.SetSchedules([]agent.Schedule{{ID: "m", TTL: 10 * time.Second}}, nil, "h")
	s, err := scheduler.New(scheduler.Options{NodeID: "a", Locker: mem, Backend: hints.Local, Observer: ag.Observer()},
		[]scheduler.Schedule{{ID: "m", CronExpr: "@every 1h", Hint: hints.RequireGlobal, ExpectedRuntime: time.Minute,
			MinRuntime: time.Hour, Job: job}})
	if err != nil {
		t.Fatal(err)
	}
	if err := mem.Enqueue(ctx, []cluster.Request{{ID: "trig-1", Schedule: "m", Tick: time.Now(), By: "alice@host-1", At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	ended := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); ag.Run(ctx, ended) }()
	go func() {
		defer wg.Done()
		defer close(ended)
		if err := s.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	record := func(want string) cluster.Run {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			runs, err := mem.Runs(ctx, "m", 1)
			if err == nil && len(runs) == 1 && runs[0].Result == want {
				return runs[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s record of the triggered run after 20s: %+v (%v)", want, runs, err)
			}
			time.Sleep(5 * time.Millisecond) // the agent flushes on its own timer; nothing to be told by
		}
	}
	<-started
	if r := record(cluster.ResultRunning); r.By != "alice@host-1" || r.Anomaly != "" {
		t.Errorf("provisional record: by %q anomaly %q, want by alice@host-1 and no anomaly", r.By, r.Anomaly)
	}
	close(release)
	r := record(string(scheduler.ResultSuccess))
	if r.By != "alice@host-1" || !r.Manual || r.RunID != "trig-1" || r.Anomaly != cluster.AnomalyTooFast {
		t.Errorf("final record: by %q manual %v run id %q anomaly %q; want alice@host-1, manual, trig-1, too_fast",
			r.By, r.Manual, r.RunID, r.Anomaly)
	}
}

// LastSuccess finds the newest success in the cluster's history, behind
// failures and a run still going, and says when there is none.
func TestLastSuccessReadsTheHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := memory.New()
	ag := agent.New(mem, noRunner{}, agent.Options{NodeID: "a"})
	if _, ok, err := ag.LastSuccess(ctx, "s"); ok || err != nil {
		t.Fatalf("LastSuccess of no history: ok %v, %v; want none", ok, err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var runs []cluster.Run
	for i, res := range []string{"success", "success", "failure", "timeout", cluster.ResultRunning} {
		at := t0.Add(time.Duration(i) * time.Minute)
		r := cluster.Run{Schedule: "s", Tick: at, StartedAt: at, Node: "b", Result: res, Attempts: 1, RunID: string(rune('a' + i))}
		if res == cluster.ResultRunning {
			r.Attempts = 0
		}
		runs = append(runs, r)
	}
	if err := mem.RecordRuns(ctx, runs[:2], 10); err != nil {
		t.Fatal(err)
	}
	if at, ok, err := ag.LastSuccess(ctx, "s"); !ok || err != nil || !at.Equal(runs[1].Tick) {
		t.Fatalf("LastSuccess, the newest run a success: %v %v %v; want %v", at, ok, err, runs[1].Tick)
	}
	if err := mem.RecordRuns(ctx, runs[2:], 10); err != nil {
		t.Fatal(err)
	}
	if at, ok, err := ag.LastSuccess(ctx, "s"); !ok || err != nil || !at.Equal(runs[1].Tick) {
		t.Fatalf("LastSuccess behind failures and a running run: %v %v %v; want %v", at, ok, err, runs[1].Tick)
	}
}
