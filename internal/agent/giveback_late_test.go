package agent_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// syncBuffer is a log sink safe for the agent's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A give-back whose first attempt goes out once the backend's keep of the
// take's record has passed (cluster.TakeKeep from the answered take) may
// put nothing back, with no error to tell: the agent warns. One within the
// keep does not.
func TestGiveBackPastKeepWarns(t *testing.T) {
	mem := memory.New()
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())
	runs := make(manualRuns, 4)
	ag := agent.New(mem, runs, agent.Options{NodeID: "a", PollEvery: 5 * time.Millisecond, Now: now, Logger: log})
	ttl := time.Minute
	ag.SetSchedules([]agent.Schedule{{ID: "job", TTL: ttl}}, nil, "h")
	if err := mem.Enqueue(ctx, []cluster.Request{{ID: "t1", Schedule: "job", Tick: time.Now(), By: "test", At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); ag.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()
	next := func(what string) scheduler.Manual {
		t.Helper()
		select {
		case m := <-runs:
			return m
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never came", what)
		}
		return scheduler.Manual{}
	}
	const warning = "after the backend's keep"
	m := next("the first manual run")
	m.GiveBack()
	if strings.Contains(logs.String(), warning) {
		t.Fatalf("a give-back within the keep warned:\n%s", logs.String())
	}
	m2 := next("the given-back trigger's run")
	skew.Store(int64(cluster.TakeKeep(ttl) + time.Second))
	m2.GiveBack()
	if !strings.Contains(logs.String(), warning) {
		t.Fatalf("a give-back past the keep did not warn; log:\n%s", logs.String())
	}
	m3 := next("the trigger given back again")
	if err := mem.Release(ctx, m3.Handle); err != nil {
		t.Error(err)
	}
}
