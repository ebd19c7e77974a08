package scheduler

import (
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Tracing of runs. The scheduler knows nothing of a tracing library: it
// tells a RunTracer (internal/tracing implements one with OpenTelemetry)
// when a run starts, with the backend decision that granted it, and hands
// the job the trace parent the tracer returns. With Options.Tracer nil no
// tick carries anything for it and the run path pays one nil check
// (BenchmarkRunTracingOff).

// RunTracer traces runs. StartRun is called on the run's goroutine just
// before the RunStartObservers, so that they (a dead-man's switch's start
// ping) and the job see the run's trace parent. It must not block.
type RunTracer interface {
	StartRun(r RunStart, d *Decision) RunSpan
}

// RunSpan is one traced run, ended once with the run's record.
type RunSpan interface {
	// TraceParent is the W3C traceparent naming the run's span, passed to
	// the job (Tick.TraceParent) and to the run's pings; "" when the
	// tracer has no valid span for it.
	TraceParent() string
	// End ends the run's span; r.TraceParent is set.
	End(r RunRecord)
}

// Decision is the lock backend's verdict on a tick (its try-lock-tick),
// which a run's span shows as its child: the round trip's start and end
// on the scheduler's clock, the verdict, and the error, if any.
type Decision struct {
	Start, End time.Time
	Verdict    string
	Err        error
}

// tickTrace is what a traced tick carries: one pointer in the tick, nil
// with tracing off.
type tickTrace struct {
	decision *Decision
	span     RunSpan
}

// traceDecision keeps t's backend decision for its run's span.
func (s *Scheduler) traceDecision(t *tick, ans locking.TickAnswer, err error, before, after time.Time) {
	v := "error"
	if err == nil {
		v = ans.Verdict.String()
	}
	if t.trace == nil {
		t.trace = new(tickTrace)
	}
	t.trace.decision = &Decision{Start: before, End: after, Verdict: v, Err: err}
}

// traceStart starts t's run's span and returns its trace parent.
func (s *Scheduler) traceStart(t *tick, r RunStart) string {
	if t.trace == nil {
		t.trace = new(tickTrace)
	}
	t.trace.span = s.tracer.StartRun(r, t.trace.decision)
	if t.trace.span == nil {
		return ""
	}
	return t.trace.span.TraceParent()
}

// traceEnd ends t's run's span with its record, and names the span in it.
func (s *Scheduler) traceEnd(t *tick, r *RunRecord) {
	if t.trace == nil || t.trace.span == nil {
		return
	}
	sp := t.trace.span
	t.trace = nil // the span ends once, whoever records the run again
	r.TraceParent = sp.TraceParent()
	sp.End(*r)
}
