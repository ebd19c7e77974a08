package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/locking/pg"
	"github.com/bext-dev/bext-scheduler/locking/redis"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// lossyTakes is a backend whose next lose takes that took a
// request lose their reply: the backend applied them (the trigger left its
// queue, the lock is taken, the node is recorded as accepting it), the
// caller hears only that the backend did not answer. Every poll's look at
// the queues is told on polled.
type lossyTakes struct {
	agent.Backend
	mu     sync.Mutex
	lose   int
	polled chan struct{}
}

func (b *lossyTakes) TakeRequest(ctx context.Context, r cluster.TakeReq) (cluster.Taken, error) {
	tk, err := b.Backend.TakeRequest(ctx, r)
	b.mu.Lock()
	lost := err == nil && tk.Handle != nil && b.lose > 0
	if lost {
		b.lose--
	}
	b.mu.Unlock()
	if lost {
		return cluster.Taken{}, fmt.Errorf("%w: take request %q: the reply was lost", locking.ErrUnavailable, r.Schedule)
	}
	return tk, err
}

func (b *lossyTakes) Queued(ctx context.Context) ([]string, error) {
	ids, err := b.Backend.Queued(ctx)
	select {
	case b.polled <- struct{}{}:
	default:
	}
	return ids, err
}

// manualRuns is a Runner that hands each manual run to the test.
type manualRuns chan scheduler.Manual

func (r manualRuns) RunManual(m scheduler.Manual) error {
	r <- m
	return nil
}

// lockBackend is what the test needs of a backend: the agent's part and
// renewals of the run's lock.
type lockBackend interface {
	agent.Backend
	Renew(ctx context.Context, h *locking.Handle) error
}

// A trigger whose take was applied by the backend but whose reply was lost
// (once, or on the resends too) still runs, once: the agent resends the
// take with its token, and the backend answers it with the trigger the
// first attempt took, under the same lock. Before takes were resendable,
// the trigger had left its queue with the lost reply and ran nowhere. On
// memory, and on real Redis and Postgres (where the lost reply's lock is
// this Locker's: the resend is answered from it).
func TestTriggerWhoseTakeReplyWasLostRunsOnce(t *testing.T) {
	for name, open := range takeBackends() {
		for _, lose := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/lost%d", name, lose), func(t *testing.T) {
				t.Parallel()
				triggerTakeLost(t, open(t), lose)
			})
		}
	}
}

// takeBackends opens the backends the take tests run on: memory, and real
// Redis and Postgres.
func takeBackends() map[string]func(t *testing.T) lockBackend {
	return map[string]func(t *testing.T) lockBackend{
		"memory": func(*testing.T) lockBackend { return memory.New() },
		"redis": func(t *testing.T) lockBackend {
			lk, err := redis.Open(redis.Options{URL: testenv.RedisURL(t), KeyPrefix: "bext:test:" + testenv.UniqueName(t) + ":", Holder: "a"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lk.Close(context.Background()) })
			return lk
		},
		"postgres": func(t *testing.T) lockBackend {
			url, ns := testenv.PGURL(t), testenv.UniqueName(t)
			lk, err := pg.Open(context.Background(), pg.Options{URL: url, Namespace: ns, Holder: "a"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx := context.Background()
				_ = lk.Close(ctx)
				admin, err := pgx.Connect(ctx, url)
				if err != nil {
					t.Logf("cleaning: %v", err)
					return
				}
				defer func() { _ = admin.Close(ctx) }()
				for _, table := range []string{"bext_lock_fences", "bext_requests", "bext_accepted", "bext_taken", "bext_taken_heard"} {
					if _, err := admin.Exec(ctx, `DELETE FROM `+table+` WHERE namespace = $1`, ns); err != nil {
						t.Logf("cleaning %s: %v", table, err)
					}
				}
			})
			return lk
		},
	}
}

func triggerTakeLost(t *testing.T, mem lockBackend, lose int) {
	b := &lossyTakes{Backend: mem, lose: lose, polled: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	runs := make(manualRuns, 4)
	ag := agent.New(b, runs, agent.Options{NodeID: "a", PollEvery: 5 * time.Millisecond})
	ag.SetSchedules([]agent.Schedule{{ID: "job", TTL: time.Minute}}, nil, "h")
	if err := mem.Enqueue(ctx, []cluster.Request{{ID: "t1", Schedule: "job", Tick: time.Now(), By: "test", At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); ag.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()

	var m scheduler.Manual
	select {
	case m = <-runs:
	case <-time.After(10 * time.Second):
		q, _ := mem.Requests(ctx, "job")
		node, _ := mem.Accepted(ctx, "job", "t1")
		t.Fatalf("the trigger never ran: its take's reply was lost %d times (queue %v, accepted by %q)", lose, q, node)
	}
	if m.RunID != "t1" || m.ID != "job" || m.Handle == nil || m.Backfill {
		t.Fatalf("manual run %+v, want trigger t1 of job with a lock", m)
	}
	// The handle is the lock the backend holds for it.
	if err := mem.Renew(ctx, m.Handle); err != nil {
		t.Fatalf("renewing the run's lock: %v", err)
	}
	// Three more polls find nothing more to run.
	for range 3 {
		<-b.polled
	}
	select {
	case m2 := <-runs:
		t.Fatalf("trigger ran a second time: %+v", m2)
	default:
	}
	if q, err := mem.Requests(ctx, "job"); err != nil || len(q) != 0 {
		t.Errorf("queue after the run = %v, %v; want empty", q, err)
	}
	if node, err := mem.Accepted(ctx, "job", "t1"); err != nil || node != "a" {
		t.Errorf("Accepted(t1) = %q, %v; want a", node, err)
	}
	if err := mem.Release(ctx, m.Handle); err != nil {
		t.Error(err)
	}
}

// lossyGiveBacks is a backend whose next lose give-backs lose their reply:
// applied, the caller hears only that the backend did not answer.
type lossyGiveBacks struct {
	agent.Backend
	mu    sync.Mutex
	lose  int
	sends int
}

func (b *lossyGiveBacks) GiveBack(ctx context.Context, h *locking.Handle) error {
	err := b.Backend.GiveBack(ctx, h)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sends++
	if err == nil && b.lose > 0 {
		b.lose--
		return fmt.Errorf("%w: give back %q: the reply was lost", locking.ErrUnavailable, h.Key())
	}
	return err
}

// A trigger whose take's confirming renewal was applied but not answered
// (the backend counts the take heard: its trigger would never go back to
// its queue by itself) and whose run therefore did not start is given back
// (Manual.GiveBack), through a lost reply (resent: put back once), and
// runs from the next poll, once. Before GiveBack it ran nowhere.
func TestTriggerWhoseConfirmationWasLostRunsOnce(t *testing.T) {
	for name, open := range takeBackends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mem := open(t)
			b := &lossyGiveBacks{Backend: mem, lose: 1}
			ctx, cancel := context.WithCancel(context.Background())
			runs := make(manualRuns, 4)
			ag := agent.New(b, runs, agent.Options{NodeID: "a", PollEvery: 5 * time.Millisecond})
			ag.SetSchedules([]agent.Schedule{{ID: "job", TTL: time.Minute}}, nil, "h")
			if err := mem.Enqueue(ctx, []cluster.Request{{ID: "t1", Schedule: "job", Tick: time.Now(), By: "test", At: time.Now()},
				{ID: "t2", Schedule: "job", Tick: time.Now(), By: "test", At: time.Now()}}); err != nil {
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
					q, _ := mem.Requests(ctx, "job")
					t.Fatalf("%s never came (queue %v)", what, q)
				}
				return scheduler.Manual{}
			}
			m := next("the first manual run")
			if m.RunID != "t1" || m.GiveBack == nil {
				t.Fatalf("first manual run %+v, want t1 with a GiveBack", m)
			}
			// The confirming renewal: applied, its reply lost (the
			// scheduler then ends the run unstarted and gives it back).
			if err := mem.Renew(ctx, m.Handle); err != nil {
				t.Fatal(err)
			}
			m.GiveBack()
			if b.sends != 2 {
				t.Errorf("give-back sent %d times, want 2 (its first reply lost)", b.sends)
			}
			m2 := next("the given-back trigger's run")
			if m2.RunID != "t1" {
				t.Fatalf("after the give-back the next run is %q, want t1 again", m2.RunID)
			}
			if err := mem.Release(ctx, m2.Handle); err != nil {
				t.Error(err)
			}
			m3 := next("t2's run")
			if m3.RunID != "t2" {
				t.Fatalf("the run after t1 is %q, want t2 (t1 given back once)", m3.RunID)
			}
			if err := mem.Release(ctx, m3.Handle); err != nil {
				t.Error(err)
			}
			if q, err := mem.Requests(ctx, "job"); err != nil || len(q) != 0 {
				t.Errorf("queue after the runs = %v, %v; want empty", q, err)
			}
		})
	}
}
