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

// schedRunner hands the agent's manual runs to a scheduler made after it.
type schedRunner struct{ s **scheduler.Scheduler }

func (r schedRunner) RunManual(m scheduler.Manual) error { return (*r.s).RunManual(m) }

// A backfill request for a tick its schedule has not decided yet (queued
// without the operators' check, or before a mark was lost) races the
// regular tick on a node: the tick runs once, at its time, and the
// request leaves the queue rather than run the tick again later.
func TestBackfillOfUndecidedTickRunsOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	mem := memory.New(memory.WithHolder("a"))
	var mu sync.Mutex
	ran := map[int64]int{}
	job := scheduler.JobFunc(func(_ context.Context, tk scheduler.Tick) error {
		mu.Lock()
		ran[tk.Time.UnixMilli()]++
		mu.Unlock()
		return nil
	})
	var s *scheduler.Scheduler
	ag := agent.New(mem, schedRunner{&s}, agent.Options{NodeID: "a", PollEvery: 20 * time.Millisecond})
	ag.SetSchedules([]agent.Schedule{{ID: "b", TTL: 10 * time.Second}}, nil, "h")
	s, err := scheduler.New(scheduler.Options{NodeID: "a", Locker: mem, Backend: hints.Local, Observer: ag.Observer()},
		[]scheduler.Schedule{{ID: "b", CronExpr: "*/2 * * * * *", Hint: hints.RequireGlobal, ExpectedRuntime: time.Second, Job: job}})
	if err != nil {
		t.Fatal(err)
	}
	tick := time.Now().Truncate(2 * time.Second).Add(4 * time.Second)
	if err := mem.Enqueue(ctx, []cluster.Request{{ID: "bf", Schedule: "b", Tick: tick, Backfill: true, By: "test", At: time.Now()}}); err != nil {
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

	runs := func() int {
		mu.Lock()
		defer mu.Unlock()
		return ran[tick.UnixMilli()]
	}
	deadline := tick.Add(10 * time.Second)
	for {
		q, err := mem.Requests(ctx, "b")
		// The regular run is at the tick, and ends well within a second.
		if err == nil && len(q) == 0 && runs() > 0 && time.Now().After(tick.Add(time.Second)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after tick %s: %d runs of it, queue %+v (%v)", tick.Format(time.RFC3339), runs(), q, err)
		}
		time.Sleep(20 * time.Millisecond) // the run and the queue tell nothing; polled
	}
	if n := runs(); n != 1 {
		t.Errorf("tick %s ran %d times with a backfill of it queued before it was decided; want once", tick.Format(time.RFC3339), n)
	}
}
