package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// batchReleasing is a memory backend that releases through ReleaseAll
// (locking.ReleaseBatcher), counting the handles, and can fail them.
type batchReleasing struct {
	*faulty
	mem *memory.Locker

	mu       sync.Mutex
	released int
	fail     error         // when set, every handle's error instead of releasing
	gate     chan struct{} // when set, ReleaseAll waits for it first
	ctxErrs  []error       // each call's ctx.Err() once its gate opened
}

func (b *batchReleasing) ReleaseAll(ctx context.Context, hs []*locking.Handle) []error {
	b.mu.Lock()
	gate := b.gate
	b.mu.Unlock()
	if gate != nil {
		<-gate
	}
	b.mu.Lock()
	b.released += len(hs)
	b.ctxErrs = append(b.ctxErrs, ctx.Err())
	fail := b.fail
	b.mu.Unlock()
	if fail == nil {
		return b.mem.ReleaseAll(ctx, hs)
	}
	errs := make([]error, len(hs))
	for i, h := range hs {
		errs[i] = fmt.Errorf("memory: release %v: %w", h, fail)
	}
	return errs
}

func newBatchReleasing(t *testing.T, fail error, ids ...string) (*harness, *batchReleasing) {
	clock := fakeclock.New(t0)
	mem := memory.New(memory.WithClock(clock.Now), memory.WithHolder("node-a"))
	b := &batchReleasing{faulty: &faulty{inner: mem}, mem: mem, fail: fail}
	var scheds []scheduler.Schedule
	for _, id := range ids {
		scheds = append(scheds, sched(id, everyMinute, hints.RequireGlobal, &countingJob{}))
	}
	h := newHarness(t, scheduler.Options{Clock: clock, Locker: b, Backend: hints.Distributed}, scheds...).start()
	return h, b
}

// TestBatchedReleasesFreeEveryLock: ticks due together on a backend that
// releases in batches: every run's lock is given back through ReleaseAll
// (the memory backend implements it), the keys are free for the next tick
// on any node, and the next tick runs.
func TestBatchedReleasesFreeEveryLock(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	h, b := newBatchReleasing(t, nil, ids...)
	h.step(time.Minute)
	h.rec.waitRuns(t, len(ids))
	h.idle()
	b.mu.Lock()
	released := b.released
	b.mu.Unlock()
	if released != len(ids) {
		t.Errorf("%d handles released through ReleaseAll, want %d", released, len(ids))
	}
	infos, err := b.mem.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Errorf("locks still held after the runs: %v", infos)
	}
	if n := h.logs.count(slog.LevelDebug, "lock released"); n != len(ids) {
		t.Errorf("%d 'lock released' lines, want %d", n, len(ids))
	}
	h.step(time.Minute)
	h.rec.waitRuns(t, 2*len(ids))
}

// TestTickEndsOnlyOnceReleased: a run's release is queued, not waited
// for by its worker (release.go), but the tick still ends only once its
// lock is given back: with ReleaseAll stuck, the runs of 20 schedules
// are all reported and each tick still counts as running; once ReleaseAll
// answers, every lock is free and every schedule's next tick runs. (How
// few workers a burst needs now shows in BenchmarkSameSecond10k's
// workers: the count depends on timing, too much for a test.)
func TestTickEndsOnlyOnceReleased(t *testing.T) {
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("s%02d", i))
	}
	h, b := newBatchReleasing(t, nil, ids...)
	gate := make(chan struct{})
	b.mu.Lock()
	b.gate = gate
	b.mu.Unlock()
	h.clock.Advance(time.Minute)
	h.rec.waitRuns(t, len(ids)) // reported before the release
	for _, st := range h.s.Snapshot() {
		if st.Running != 1 {
			t.Errorf("schedule %s: running %d while its release waits, want 1 (finished only once its lock is given back)", st.ID, st.Running)
		}
	}
	close(gate)
	h.idle()
	infos, err := b.mem.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Errorf("locks still held after the releases were answered: %v", infos)
	}
	h.step(time.Minute)
	h.rec.waitRuns(t, 2*len(ids))
}

// TestBatchedReleaseFailureIsEachHandles: a batch release that fails is
// reported for each handle as a single failed release is: one "releasing
// lock failed" line per schedule, at warn for a backend error and at info
// for a lock already lost, naming the schedule and the fence.
func TestBatchedReleaseFailureIsEachHandles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fail  error
		level slog.Level
	}{
		{"unavailable", locking.ErrUnavailable, slog.LevelWarn},
		{"lost", locking.ErrLockLost, slog.LevelInfo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids := []string{"a", "b", "c"}
			h, _ := newBatchReleasing(t, tc.fail, ids...)
			h.step(time.Minute)
			h.rec.waitRuns(t, len(ids))
			h.idle()
			if n := h.logs.count(tc.level, "releasing lock failed"); n != len(ids) {
				t.Fatalf("%d 'releasing lock failed' lines at %v, want one per schedule (%d)", n, tc.level, len(ids))
			}
			seen := map[string]bool{}
			h.logs.mu.Lock()
			for _, r := range h.logs.recs {
				if r.Message != "releasing lock failed" {
					continue
				}
				var id string
				var fence int64
				r.Attrs(func(a slog.Attr) bool {
					switch a.Key {
					case "schedule":
						id = a.Value.String()
					case "fence":
						fence = a.Value.Int64()
					}
					return true
				})
				if fence <= 0 {
					t.Errorf("schedule %s: failed release logged without its fence", id)
				}
				seen[id] = true
			}
			h.logs.mu.Unlock()
			if len(seen) != len(ids) {
				t.Errorf("failed releases logged for %v, want each of %v", seen, ids)
			}
		})
	}
}

// TestShutdownWaitsForQueuedReleases: Run's context ends while the runs'
// releases are queued (ReleaseAll stuck) and the shutdown grace then runs
// out: Run does not return before every release was answered, the
// releases' context is not the one the grace cancelled, and once Run has
// returned no lock is left held.
func TestShutdownWaitsForQueuedReleases(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	h, b := newBatchReleasing(t, nil, ids...)
	gate := make(chan struct{})
	b.mu.Lock()
	b.gate = gate
	b.mu.Unlock()
	h.clock.Advance(time.Minute)
	h.rec.waitRuns(t, len(ids))

	h.cancel()
	h.cancel = nil // this test waits for Run itself
	h.logs.waitFor(t, slog.LevelInfo, "shutting down")
	select {
	case <-h.done:
		t.Fatal("Run returned while the runs' releases were queued")
	default:
	}
	h.clock.Advance(scheduler.DefaultShutdownGrace + time.Second)
	h.logs.waitFor(t, slog.LevelWarn, "shutdown grace ran out: cancelling running jobs")
	select {
	case <-h.done:
		t.Fatal("Run returned after the grace while the runs' releases were queued")
	default:
	}
	close(gate)
	select {
	case err := <-h.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return once the releases were answered")
	}
	infos, err := b.mem.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Errorf("locks still held after Run returned: %v", infos)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released != len(ids) {
		t.Errorf("%d handles released, want %d", b.released, len(ids))
	}
	for _, e := range b.ctxErrs {
		if e != nil {
			t.Errorf("a release was sent with a context already ended: %v", e)
		}
	}
}
