package scheduler

import "time"

// Observers returns an Observer that tells each of obs everything, and
// implements each optional observer interface (ClockObserver,
// RunObserver, RunStartObserver, AttemptObserver, SkipObserver) for those of obs that do: metrics, the
// cluster's history and the dead-man's switch each see what they want.
func Observers(obs ...Observer) Observer { return fanout(obs) }

type fanout []Observer

func (f fanout) TickFired(id string, tick time.Time, lateness time.Duration) {
	for _, o := range f {
		o.TickFired(id, tick, lateness)
	}
}

func (f fanout) TickSkipped(id string, tick time.Time, reason SkipReason) {
	for _, o := range f {
		o.TickSkipped(id, tick, reason)
	}
}

func (f fanout) RunFinished(id string, tick time.Time, result RunResult, d time.Duration, overrun bool) {
	for _, o := range f {
		o.RunFinished(id, tick, result, d, overrun)
	}
}

func (f fanout) NextTick(id string, next time.Time) {
	for _, o := range f {
		o.NextTick(id, next)
	}
}

func (f fanout) ClockOffset(d time.Duration) {
	for _, o := range f {
		if c, ok := o.(ClockObserver); ok {
			c.ClockOffset(d)
		}
	}
}

func (f fanout) RunRecorded(r RunRecord) {
	for _, o := range f {
		if c, ok := o.(RunObserver); ok {
			c.RunRecorded(r)
		}
	}
}

func (f fanout) RunStarted(r RunStart) {
	for _, o := range f {
		if c, ok := o.(RunStartObserver); ok {
			c.RunStarted(r)
		}
	}
}

func (f fanout) SkipRecorded(r SkipRecord) {
	for _, o := range f {
		if c, ok := o.(SkipObserver); ok {
			c.SkipRecorded(r)
		}
	}
}

func (f fanout) AttemptStarted(runID string, attempt int) {
	for _, o := range f {
		if c, ok := o.(AttemptObserver); ok {
			c.AttemptStarted(runID, attempt)
		}
	}
}
