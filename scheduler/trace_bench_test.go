package scheduler_test

import (
	"testing"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// BenchmarkRunTracingOff: a burst of 1,000 locked ticks' runs (as
// BenchmarkLockedBurst: ns/op and allocs/op per burst) with tracing off,
// the default (no Tracer), and, interleaved in the same run, with a
// tracer that does nothing (nop): what the hook itself costs once on.
// Off must match BenchmarkLockedBurst of the engine before tracing
// existed; the figures, measured both ways, are in docs/OPERATING.md
// "Tracing".
//
//	go test -run '^$' -bench 'RunTracingOff' -count 6 -benchtime 200x ./scheduler/
func BenchmarkRunTracingOff(b *testing.B) {
	b.Run("off", func(b *testing.B) { lockedBurst(b, nil) })
	b.Run("nop", func(b *testing.B) { lockedBurst(b, nopTracer{}) })
}

// nopTracer starts no span: the cost of asking.
type nopTracer struct{}

func (nopTracer) StartRun(scheduler.RunStart, *scheduler.Decision) scheduler.RunSpan { return nil }
