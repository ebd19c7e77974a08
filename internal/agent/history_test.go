package agent_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// eventually polls cond until it holds: the agent flushes on its own timer,
// and there is nothing to be told by.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A run's start writes its provisional record (result running, with its
// node and fence), which its final record replaces; a skip record is
// written with the pause's note; and pause_after_failures does not count a
// run still going as a run.
func TestHistoryKeepsStartsAndSkips(t *testing.T) {
	mem := memory.New()
	ag := agent.New(mem.Peer("a"), noRunner{}, agent.Options{NodeID: "a", FlushEvery: time.Millisecond})
	ag.SetSchedules([]agent.Schedule{{ID: "s", TTL: time.Minute, PauseAfterFailures: 3}}, nil, "h")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ag.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()
	obs := ag.Observer()
	starts, _ := obs.(scheduler.RunStartObserver)
	runs, _ := obs.(scheduler.RunObserver)
	skips, _ := obs.(scheduler.SkipObserver)
	if starts == nil || runs == nil || skips == nil {
		t.Fatalf("the agent's observer keeps starts %v, runs %v, skips %v: want all", starts != nil, runs != nil, skips != nil)
	}
	bg := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	history := func() []cluster.Run {
		rs, err := mem.Runs(bg, "s", 100)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}

	starts.RunStarted(scheduler.RunStart{Schedule: "s", Tick: at(1), Node: "a", RunID: "r1", Start: at(1), Fence: 42})
	eventually(t, "the running record in history", func() bool { return len(history()) == 1 })
	if r := history()[0]; r.Result != cluster.ResultRunning || r.Attempts != 0 || r.Fence != 42 || r.Node != "a" || !r.Tick.Equal(at(1)) {
		t.Fatalf("running record %+v", r)
	}
	fail := func(i int, id string) scheduler.RunRecord {
		return scheduler.RunRecord{Schedule: "s", Tick: at(i), Node: "a", Result: scheduler.ResultFailure, Start: at(i),
			Fence: 42, Attempts: 1, RunID: id, Err: errors.New("exit status 1")}
	}
	runs.RunRecorded(fail(1, "r1"))
	eventually(t, "the final record replacing the running one", func() bool {
		h := history()
		return len(h) == 1 && h[0].Result == string(scheduler.ResultFailure)
	})

	// Two more failures, the third ending while a later run already
	// started: its running record is the newest, and no failure.
	runs.RunRecorded(fail(2, "r2"))
	eventually(t, "two runs", func() bool { return len(history()) == 2 })
	starts.RunStarted(scheduler.RunStart{Schedule: "s", Tick: at(4), Node: "a", RunID: "r4", Start: at(4), Fence: 44})
	eventually(t, "r4 running", func() bool { return len(history()) == 3 })
	runs.RunRecorded(fail(3, "r3"))
	eventually(t, "paused after 3 failures in a row, a run still going", func() bool {
		p, err := mem.GetPause(bg, "s")
		return err == nil && p.Paused
	})

	// A paused tick's skip carries the pause's note.
	if err := mem.SetPause(bg, "s", locking.Pause{Paused: true, Note: "disk full, see ticket 12"}); err != nil {
		t.Fatal(err)
	}
	skips.SkipRecorded(scheduler.SkipRecord{Schedule: "s", Tick: at(5), Node: "a", Reason: scheduler.RecordPaused, At: at(5)})
	skips.SkipRecorded(scheduler.SkipRecord{Schedule: "s", Tick: at(6), Node: "a", Reason: scheduler.RecordStopped, At: at(7)})
	var ks []cluster.Skip
	eventually(t, "two skips", func() bool {
		var err error
		ks, err = mem.Skips(bg, "s", 10)
		return err == nil && len(ks) == 2
	})
	if ks[1].Reason != cluster.SkipPaused || ks[1].Note != "disk full, see ticket 12" || !ks[1].Tick.Equal(at(5)) || ks[1].Node != "a" {
		t.Fatalf("paused skip %+v", ks[1])
	}
	if ks[0].Reason != cluster.SkipStopped || ks[0].Note != "" || !ks[0].At.Equal(at(7)) {
		t.Fatalf("stopped skip %+v", ks[0])
	}
}
