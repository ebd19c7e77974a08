package agent_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// pause_after_failures = 3 pauses the schedule cluster-wide after the
// third failed run in a row (whichever nodes ran them), with a note
// saying why, and tells the notifier; a success in between resets it.
func TestPauseAfterFailures(t *testing.T) {
	mem := memory.New()
	var mu sync.Mutex
	var told []string
	nodes := []*agent.Agent{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b", "c"} {
		ag := agent.New(mem.Peer(id), noRunner{}, agent.Options{NodeID: id, FlushEvery: time.Millisecond,
			Paused: func(schedule, note string) { mu.Lock(); told = append(told, schedule+": "+note); mu.Unlock() }})
		ag.SetSchedules([]agent.Schedule{{ID: "s", TTL: time.Minute, PauseAfterFailures: 3}}, nil, "h")
		nodes = append(nodes, ag)
		wg.Add(1)
		go func() { defer wg.Done(); ag.Run(ctx, nil) }()
	}
	defer func() { cancel(); wg.Wait() }()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	record := func(i int, node int, result scheduler.RunResult) {
		r := scheduler.RunRecord{Schedule: "s", Tick: t0.Add(time.Duration(i) * time.Minute), Node: nodes[node].NodeID(),
			Result: result, Start: t0.Add(time.Duration(i) * time.Minute), Attempts: 1, RunID: string(rune('a'+i)) + "-run"}
		if result == scheduler.ResultFailure {
			r.Err = errors.New("exit status 1")
		}
		nodes[node].RunRecorded(r)
	}
	waitRuns := func(n int) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			runs, err := mem.Runs(context.Background(), "s", 100)
			if err == nil && len(runs) >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d runs in history, want %d", len(runs), n)
			}
			time.Sleep(5 * time.Millisecond) // the agents flush on their own timers; nothing to be told by
		}
	}
	paused := func() bool {
		p, err := mem.GetPause(context.Background(), "s")
		return err == nil && p.Paused
	}
	// One run at a time, each in the history before the next ends, as runs
	// of one schedule are in practice (a node deciding on a history that
	// lags a run behind could count a streak across a success).
	for i, r := range []struct {
		node   int
		result scheduler.RunResult
	}{{0, scheduler.ResultFailure}, {1, scheduler.ResultFailure}, {2, scheduler.ResultSuccess},
		{0, scheduler.ResultFailure}, {1, scheduler.ResultFailure}} {
		record(i, r.node, r.result)
		waitRuns(i + 1)
	}
	if paused() {
		t.Fatal("paused after 2 failures in a row (a success came between)")
	}
	record(5, 2, scheduler.ResultFailure) // the third in a row, on a third node
	waitRuns(6)
	deadline := time.Now().Add(20 * time.Second)
	for !paused() {
		if time.Now().After(deadline) {
			t.Fatal("not paused after 3 failed runs in a row")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p, _ := mem.GetPause(context.Background(), "s")
	if p.Note != "paused after 3 failed runs in a row (pause_after_failures)" {
		t.Errorf("pause note %q", p.Note)
	}
	mu.Lock()
	if len(told) != 1 {
		t.Errorf("notifier told %v, want once", told)
	}
	mu.Unlock()
	if as, err := mem.Actions(context.Background(), "s", 5); err != nil || len(as) != 1 || as[0].Kind != cluster.ActionPause || as[0].By != "node c" {
		t.Errorf("acts after the pause after failures: %+v, %v; want one pause by \"node c\"", as, err)
	}

	// A resume starts a new streak: the next failure does not pause again,
	// the third after the resume does, whatever the resuming host's clock.
	if err := mem.SetPause(context.Background(), "s", locking.Pause{}); err != nil {
		t.Fatal(err)
	}
	// Stamped by a CLI whose clock runs a year ahead: the streak starts
	// after the newest run history held (StreakFrom, the nodes' stamp),
	// not at the resume's At, or no failure would count for a year.
	from := t0.Add(5 * time.Minute)
	resume := cluster.Action{Schedule: "s", Kind: cluster.ActionResume, By: "ops@host",
		At: time.Now().Add(365 * 24 * time.Hour), StreakFrom: &from}
	if err := mem.RecordAction(context.Background(), resume, 10); err != nil {
		t.Fatal(err)
	}
	for i := 6; i < 8; i++ {
		record(i, i%3, scheduler.ResultFailure)
		waitRuns(i + 1)
	}
	if paused() {
		t.Fatal("paused again after 2 failures since the resume: a resume must start a new streak")
	}
	record(8, 2, scheduler.ResultFailure)
	waitRuns(9)
	deadline = time.Now().Add(20 * time.Second)
	for !paused() {
		if time.Now().After(deadline) {
			t.Fatal("not paused after 3 failed runs in a row since the resume")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A run that ends after the node's stop began (during the shutdown grace)
// still reaches the history once Run is told the runs have ended, and
// counts for the failure streak.
func TestRunsEndingAfterStopAreRecorded(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	ag := agent.New(mem.Peer("a"), noRunner{}, agent.Options{NodeID: "a", FlushEvery: time.Hour})
	ag.SetSchedules([]agent.Schedule{{ID: "s", TTL: time.Minute, PauseAfterFailures: 1}}, nil, "h")
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); ag.Run(ctx, ended) }()
	cancel() // the signal: the agent's duties stop, the running jobs go on
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ag.RunRecorded(scheduler.RunRecord{Schedule: "s", Tick: t0, Node: "a", Result: scheduler.ResultFailure,
		Start: t0, Attempts: 1, RunID: "late-run", Err: errors.New("exit status 1")})
	close(ended) // the scheduler's Run returned
	<-done
	runs, err := mem.Runs(context.Background(), "s", 10)
	if err != nil || len(runs) != 1 || runs[0].RunID != "late-run" {
		t.Fatalf("history after the stop: %+v, %v; want the run that ended during the grace", runs, err)
	}
	if p, err := mem.GetPause(context.Background(), "s"); err != nil || !p.Paused {
		t.Errorf("pause after its failure: %+v, %v; want paused (pause_after_failures = 1)", p, err)
	}
}
