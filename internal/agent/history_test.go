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

// Each schedule's recent ticks are audited by one live node (the first in
// its rendezvous order), every AuditEvery, and what the audit finds is
// told to Lost.
func TestAuditEachScheduleOnOneNode(t *testing.T) {
	mem := memory.New()
	ids := []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"}
	var scheds []agent.Schedule
	for _, id := range ids {
		scheds = append(scheds, agent.Schedule{ID: id, TTL: time.Minute})
	}
	type told struct {
		node string
		ids  []string
		lost map[string]int
	}
	calls := make(chan told, 64)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, node := range []string{"a", "b"} {
		var asked []string
		ag := agent.New(mem.Peer(node), noRunner{}, agent.Options{NodeID: node, AnnounceEvery: 20 * time.Millisecond,
			AuditEvery: 50 * time.Millisecond,
			Audit: func(_ context.Context, ids []string) (map[string][]time.Time, error) {
				asked = ids
				return map[string][]time.Time{ids[0]: {time.Unix(60, 0)}}, nil
			},
			Lost: func(lost map[string]int) {
				select {
				case calls <- told{node, asked, lost}:
				default:
				}
			}})
		ag.SetSchedules(scheds, nil, "h")
		wg.Add(1)
		go func() { defer wg.Done(); ag.Run(ctx, nil) }()
	}
	// Once both nodes see each other, every schedule is audited by
	// exactly one of them.
	deadline := time.After(20 * time.Second)
	last := map[string]told{}
	for {
		select {
		case c := <-calls:
			last[c.node] = c
		case <-deadline:
			t.Fatalf("never split between the two nodes: %+v", last)
		}
		if len(last["a"].ids)+len(last["b"].ids) != len(ids) || len(last["a"].ids) == 0 || len(last["b"].ids) == 0 {
			continue
		}
		seen := map[string]int{}
		for _, c := range last {
			for _, id := range c.ids {
				seen[id]++
			}
			if c.lost[c.ids[0]] != 1 {
				t.Fatalf("%s told Lost %v, want its audit's answer", c.node, c.lost)
			}
		}
		if len(seen) == len(ids) {
			return
		}
	}
}

// TestLostTickToldOnce: a lost tick is told to LostTick when a second
// audit in a row finds it (one that read lost only until its record came
// is not), not on every audit that still finds it; a tick the audit no
// longer finds is forgotten, and a failed audit forgets nothing.
func TestLostTickToldOnce(t *testing.T) {
	t.Parallel()
	t0, t1, t2 := time.Unix(0, 0).UTC(), time.Unix(60, 0).UTC(), time.Unix(120, 0).UTC()
	// What each audit finds, in turn; past the end, the last again.
	answers := []struct {
		found map[string][]time.Time
		err   error
	}{
		{map[string][]time.Time{"s1": {t0}}, nil}, // lost until its record came
		{map[string][]time.Time{"s1": {t1}}, nil},
		{map[string][]time.Time{"s1": {t1}}, nil}, // t1 told
		{map[string][]time.Time{"s1": {t1, t2}}, nil},
		{map[string][]time.Time{}, errors.New("backend down for s1")}, // says nothing of s1
		{map[string][]time.Time{"s1": {t1, t2}}, nil},
		{map[string][]time.Time{"s1": {t2}}, nil}, // t1 ran after all (its record came late)
		{map[string][]time.Time{"s1": {t1, t2}}, nil},
	}
	type told struct {
		id   string
		tick time.Time
	}
	tells := make(chan told, 64)
	audits := make(chan int, 64)
	var mu sync.Mutex
	n := 0
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	ag := agent.New(memory.New().Peer("a"), noRunner{}, agent.Options{NodeID: "a", AnnounceEvery: 10 * time.Millisecond,
		AuditEvery: 20 * time.Millisecond,
		Audit: func(context.Context, []string) (map[string][]time.Time, error) {
			mu.Lock()
			defer mu.Unlock()
			a := answers[min(n, len(answers)-1)]
			n++
			return a.found, a.err
		},
		Lost: func(map[string]int) {
			select {
			case audits <- 1:
			default:
			}
		},
		LostTick: func(id string, tick time.Time) { tells <- told{id, tick} },
	})
	ag.SetSchedules([]agent.Schedule{{ID: "s1", TTL: time.Minute}}, nil, "h")
	wg.Add(1)
	go func() { defer wg.Done(); ag.Run(ctx, nil) }()
	for range len(answers) + 2 {
		select {
		case <-audits:
		case <-time.After(20 * time.Second):
			t.Fatal("the audit loop stopped")
		}
	}
	cancel()
	wg.Wait()
	close(tells)
	var got []told
	for tl := range tells {
		got = append(got, tl)
	}
	want := []told{{"s1", t1}, {"s1", t2}, {"s1", t1}}
	if len(got) != len(want) {
		t.Fatalf("told %v, want %v", got, want)
	}
	for i := range want {
		if got[i].id != want[i].id || !got[i].tick.Equal(want[i].tick) {
			t.Fatalf("told %v, want %v", got, want)
		}
	}
}
