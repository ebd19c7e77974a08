package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// rerunRunner records the manual runs its nodes are handed, and each
// node releases the run's lock at once, as a run would when it ends.
type rerunRunner struct {
	mu   sync.Mutex
	runs []scheduler.Manual
	errs []error
	got  chan struct{}
}

type nodeRunner struct {
	r *rerunRunner
	b interface {
		Release(context.Context, *locking.Handle) error
	}
}

func (n nodeRunner) RunManual(m scheduler.Manual) error {
	err := n.b.Release(context.Background(), m.Handle)
	n.r.mu.Lock()
	n.r.runs = append(n.r.runs, m)
	if err != nil {
		n.r.errs = append(n.r.errs, err)
	}
	n.r.mu.Unlock()
	n.r.got <- struct{}{}
	return nil
}

// on_node_loss = "rerun": a run whose node is gone from the registry,
// left in history as its provisional record (result running), is handed
// to the scheduler again by a live node, once: the same run id and tick,
// attempt 2, recorded as the lost run (its start), under the schedule's
// lock. Two nodes that both look, again and again, re-run it once (the
// re-run marker); a run whose node is live is left alone, and so is one
// whose tick left its window.
func TestRerunLostRunOnce(t *testing.T) {
	mem := memory.New()
	ctx := context.Background()
	now := time.Now()
	lost := cluster.Run{Schedule: "s", Tick: now.Add(-10 * time.Second).Truncate(time.Second), Node: "dead",
		Result: cluster.ResultRunning, StartedAt: now.Add(-9 * time.Second), RunID: "run-1", Fence: 7}
	old := cluster.Run{Schedule: "o", Tick: now.Add(-time.Hour), Node: "dead", Result: cluster.ResultRunning,
		StartedAt: now.Add(-time.Hour), RunID: "run-o"}
	alive := cluster.Run{Schedule: "l", Tick: now.Add(-5 * time.Second), Node: "b", Result: cluster.ResultRunning,
		StartedAt: now.Add(-5 * time.Second), RunID: "run-l"}
	if err := mem.RecordRuns(ctx, []cluster.Run{lost, old, alive}, 10); err != nil {
		t.Fatal(err)
	}
	runner := &rerunRunner{got: make(chan struct{}, 1000)}
	var agents []*agent.Agent
	for _, id := range []string{"a", "b"} {
		peer := mem.Peer(id)
		ag := agent.New(peer, nodeRunner{runner, peer}, agent.Options{NodeID: id, AnnounceEvery: 20 * time.Millisecond,
			RerunEvery: 10 * time.Millisecond, PollEvery: 10 * time.Millisecond, FlushEvery: time.Millisecond})
		ag.SetSchedules([]agent.Schedule{
			{ID: "s", TTL: time.Minute, Rerun: true, RerunWindow: time.Minute},
			{ID: "o", TTL: time.Minute, Rerun: true, RerunWindow: time.Minute}, // its tick is an hour old
			{ID: "l", TTL: time.Minute, Rerun: true, RerunWindow: time.Minute}, // its node lives
		}, nil, "h")
		agents = append(agents, ag)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	// b, which runs "l", is live before a looks.
	for i, ag := range []*agent.Agent{agents[1], agents[0]} {
		wg.Add(1)
		go func() { defer wg.Done(); ag.Run(runCtx, nil) }()
		for i == 0 {
			ns, err := mem.Nodes(ctx)
			if err == nil && len(ns) == 1 {
				break
			}
			time.Sleep(5 * time.Millisecond) // the announce has its own timer; nothing to be told by
		}
	}
	select {
	case <-runner.got:
	case <-time.After(20 * time.Second):
		t.Fatal("the lost run was never re-run")
	}
	// Both nodes go on looking, a hundred times each, for a second.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // proving an absence: nothing to be told by
	}
	runner.mu.Lock()
	defer runner.mu.Unlock()
	if len(runner.errs) != 0 {
		t.Fatalf("releasing the re-run's lock: %v", runner.errs)
	}
	if len(runner.runs) != 1 {
		t.Fatalf("%d re-runs, want 1; the first: %+v", len(runner.runs), runner.runs[0])
	}
	m := runner.runs[0]
	if m.ID != "s" || m.RunID != "run-1" || !m.Tick.Equal(lost.Tick) || m.Rerun == nil || m.Rerun.Attempt != 2 ||
		!m.Rerun.Start.Equal(lost.StartedAt) || m.Handle == nil || m.Handle.Key() != "s" {
		t.Fatalf("re-run %+v (rerun %+v), want run-1 of s at its tick, attempt 2, from its start, under the schedule's lock", m, m.Rerun)
	}
}

// A node restarted under the same id (its supervisor brought it back
// before the registry forgot it) lost the run its previous process had
// going: the run is re-run, here by the restarted node itself. A run that
// began after the node's start is its own and is left alone.
func TestRerunAfterARestartUnderTheSameID(t *testing.T) {
	mem := memory.New()
	ctx := context.Background()
	now := time.Now()
	lost := cluster.Run{Schedule: "s", Tick: now.Add(-10 * time.Second).Truncate(time.Second), Node: "a",
		Result: cluster.ResultRunning, StartedAt: now.Add(-9 * time.Second), RunID: "run-old"}
	mine := cluster.Run{Schedule: "m", Tick: now.Add(-time.Second).Truncate(time.Second), Node: "a",
		Result: cluster.ResultRunning, StartedAt: now.Add(time.Second), RunID: "run-mine"}
	if err := mem.RecordRuns(ctx, []cluster.Run{lost, mine}, 10); err != nil {
		t.Fatal(err)
	}
	runner := &rerunRunner{got: make(chan struct{}, 100)}
	peer := mem.Peer("a")
	ag := agent.New(peer, nodeRunner{runner, peer}, agent.Options{NodeID: "a", StartedAt: now, AnnounceEvery: 20 * time.Millisecond,
		RerunEvery: 10 * time.Millisecond, FlushEvery: time.Millisecond})
	ag.SetSchedules([]agent.Schedule{{ID: "s", TTL: time.Minute, Rerun: true, RerunWindow: time.Minute},
		{ID: "m", TTL: time.Minute, Rerun: true, RerunWindow: time.Minute}}, nil, "h")
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); ag.Run(runCtx, nil) }()
	defer func() { cancel(); <-done }()
	select {
	case <-runner.got:
	case <-time.After(20 * time.Second):
		t.Fatal("the run of the node's previous process was never re-run")
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // proving an absence: nothing to be told by
	}
	runner.mu.Lock()
	defer runner.mu.Unlock()
	if len(runner.runs) != 1 || runner.runs[0].RunID != "run-old" {
		t.Fatalf("re-runs %d (the first %+v), want run-old only", len(runner.runs), runner.runs[0])
	}
}
