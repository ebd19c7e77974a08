package scheduler

import "context"

// WaitIdle waits until the scheduler has handled every event due by its
// clock and no tick or release goroutine is in flight: the step a
// fake-clock test takes after each Advance instead of sleeping.
func (s *Scheduler) WaitIdle(ctx context.Context) error { return s.waitIdle(ctx) }
