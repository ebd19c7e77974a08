package scheduler

import (
	"context"
	"fmt"
	"time"
)

// WaitIdle waits until the scheduler has handled every event due by its
// clock and no tick or release goroutine is in flight: the step a
// fake-clock test takes after each Advance instead of sleeping.
func (s *Scheduler) WaitIdle(ctx context.Context) error { return s.waitIdle(ctx) }

// IdleState describes why the scheduler is not idle, for test failures.
func (s *Scheduler) IdleState() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	head := "none"
	if h := s.heap.head(); h != nil {
		head = fmt.Sprintf("%d kind %d (now %d)", h.at, h.kind, s.clock.Now().UnixNano())
	}
	return fmt.Sprintf("parked %v inflight %d wake pending %v head %s", s.parked, s.inflight, s.wakePending, head)
}

// WorkersStarted is how many worker goroutines the scheduler has started
// (internal/workpool): the benchmarks report it next to the number of ticks.
func (s *Scheduler) WorkersStarted() int {
	return s.work.Started()
}

// WaitLoopParked waits until the firing loop has taken every wake and
// armed its timer to the heap's head, even while ticks are in flight
// (WaitIdle would wait for them): the step a test takes after Reload,
// before it moves a fake clock the loop may still be re-arming against.
func (s *Scheduler) WaitLoopParked(ctx context.Context) error {
	return s.waitUntil(ctx, func() bool {
		return s.parked && !s.wakePending && s.wakeAt > s.clock.Now().UnixNano()
	})
}

// WaitProbeArmed waits until the recovery goroutine waits on its armed
// probe timer (a backend outage), so a fake clock's move fires it.
func (s *Scheduler) WaitProbeArmed(ctx context.Context) error {
	return s.waitUntil(ctx, func() bool { return s.backend.probeArmed })
}

// WaitProbeArmedOrRecovered is WaitProbeArmed, or the outage already over:
// a probe under way when the backend came back finds it back, and no
// probe is armed after it.
func (s *Scheduler) WaitProbeArmedOrRecovered(ctx context.Context) error {
	return s.waitUntil(ctx, func() bool { return s.backend.probeArmed || !s.backend.down.Load() })
}

// WakeIn is how long from now, by the scheduler's clock, the parked loop
// is due to wake on its own (the heap's head, or the bound on its sleep).
func (s *Scheduler) WakeIn() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.wakeAt - s.clock.Now().UnixNano())
}

// MaxSleep and WallSafetySleep are the loop's bounds on one sleep: on the
// timer alone, and with the kernel's wall-clock wake (wake_linux.go).
const (
	MaxSleep        = maxSleep
	WallSafetySleep = wallSafetySleep
)

// A tick that breaks its life's order (ended twice, moved back) fails the
// test that made it, loudly, where production logs and refuses the step.
func init() { tickMisstep = func(msg string) { panic(msg) } }

// Inflight is how many ticks are in flight on the scheduler (fired and
// not ended).
func (s *Scheduler) Inflight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.inflight)
}
