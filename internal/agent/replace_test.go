package agent_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// overlap = "replace" across nodes: node b's tick at t2 asks to replace
// the runs of the schedule's earlier ticks (ReplaceRuns). Node a, which
// runs the tick t1's run and a manual run of a later tick, is asked,
// through a stop request of reason replace, to stop t1's run only, with
// ReplaceRun (recorded replaced), never StopRun; a second ask names no
// run again.
func TestReplaceRunsStopsEarlierRunsElsewhere(t *testing.T) {
	mem := memory.New()
	t1 := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	t2, t3 := t1.Add(time.Minute), t1.Add(2*time.Minute)
	var mu sync.Mutex
	var replaced, stopped []string
	replacedCh := make(chan struct{}, 8)
	a := agent.New(mem.Peer("a"), noRunner{}, agent.Options{NodeID: "a", FlushEvery: time.Millisecond,
		AnnounceEvery: 50 * time.Millisecond, PollEvery: 20 * time.Millisecond,
		StopRun: func(id string) bool { mu.Lock(); stopped = append(stopped, id); mu.Unlock(); return true },
		ReplaceRun: func(id string) bool {
			mu.Lock()
			replaced = append(replaced, id)
			mu.Unlock()
			replacedCh <- struct{}{}
			return true
		}})
	b := agent.New(mem.Peer("b"), noRunner{}, agent.Options{NodeID: "b", FlushEvery: time.Millisecond,
		AnnounceEvery: 50 * time.Millisecond, PollEvery: 20 * time.Millisecond,
		StopRun: func(string) bool { t.Error("b asked to stop a run"); return false }})
	for _, ag := range []*agent.Agent{a, b} {
		ag.SetSchedules([]agent.Schedule{{ID: "s", TTL: time.Minute}}, nil, "h")
	}
	a.RunStarted(scheduler.RunStart{Schedule: "s", Tick: t1, Node: "a", RunID: "run-t1", Start: t1})
	a.RunStarted(scheduler.RunStart{Schedule: "s", Tick: t3, Node: "a", RunID: "run-t3", Start: t3, Manual: true})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, ag := range []*agent.Agent{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); ag.Run(ctx, nil) }()
	}
	defer func() { cancel(); wg.Wait() }()

	// Wait for a's runs to be announced: b reads them from there.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ns, err := mem.Nodes(context.Background())
		if err == nil && slices.ContainsFunc(ns, func(n cluster.Node) bool { return n.NodeID == "a" && len(n.Running) == 2 }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node a's runs never announced")
		}
		time.Sleep(10 * time.Millisecond) // the announce loop has its own timer; nothing to be told by
	}
	b.ReplaceRuns("s", t2)
	select {
	case <-replacedCh:
	case <-time.After(20 * time.Second):
		t.Fatal("node a was never asked to replace its run")
	}
	reqs, err := mem.StopRequests(context.Background())
	if err != nil || len(reqs) != 1 {
		t.Fatalf("stop requests %+v, %v; want one", reqs, err)
	}
	if r := reqs[0]; r.Reason != cluster.StopReplace || !slices.Equal(r.RunIDs, []string{"run-t1"}) || r.Schedule != "s" {
		t.Fatalf("stop request %+v, want reason replace naming run-t1 only", r)
	}
	b.ReplaceRuns("s", t2) // its next try: run-t1 is named already
	deadline = time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // proving an absence: nothing to be told by
	}
	if reqs, _ := mem.StopRequests(context.Background()); len(reqs) != 1 {
		t.Errorf("%d stop requests after the second ask, want still one", len(reqs))
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(replaced, []string{"run-t1"}) || len(stopped) != 0 {
		t.Errorf("a replaced %v and stopped %v; want run-t1 replaced, nothing stopped", replaced, stopped)
	}
}
