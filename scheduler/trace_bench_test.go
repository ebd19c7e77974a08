package scheduler_test

import (
	"testing"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// BenchmarkRunTracingOff: a burst of 1,000 locked ticks' runs (as
// BenchmarkLockedBurst: ns/op and allocs/op per burst) with tracing off,
// the default (no Tracer), and, interleaved in the same run, with a
// tracer that does nothing (nop): what the hook itself costs once on.
//
// Off must cost what the engine cost before it had a tracing hook. Six
// rounds, each running the test binary of the commit before the hook
// (BenchmarkLockedBurst) then this one (BenchmarkLockedBurst and this),
// -benchtime 500x -benchmem, on the shared 2-core machine; medians:
//
//	before the hook, LockedBurst   3.57 ms/burst  640 KB  5,357 allocs
//	off                            3.47 ms/burst  640 KB  5,359 allocs
//	nop tracer                     3.60 ms/burst  745 KB  7,390 allocs
//
// Time scatters by a third between rounds there (2.7 to 4.8 ms for the
// same binary); bytes and allocations do not, and off matches the engine
// before the hook to within that scatter (the burst's own retries move
// it by tens). A traced run costs two allocations more (its decision and
// the tick's trace), besides the tracer's own.
//
//	go test -run '^$' -bench 'LockedBurst|RunTracingOff' -benchmem -count 6 -benchtime 500x ./scheduler/
func BenchmarkRunTracingOff(b *testing.B) {
	b.Run("off", func(b *testing.B) { lockedBurst(b, nil) })
	b.Run("nop", func(b *testing.B) { lockedBurst(b, nopTracer{}) })
}

// nopTracer starts no span: the cost of asking.
type nopTracer struct{}

func (nopTracer) StartRun(scheduler.RunStart, *scheduler.Decision) scheduler.RunSpan { return nil }
