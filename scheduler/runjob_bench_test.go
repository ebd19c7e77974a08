package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
)

// dailySpec fires a day after any time: never within a benchmark.
type dailySpec struct{}

func (dailySpec) Next(t time.Time) time.Time { return t.Add(24 * time.Hour) }

// BenchmarkRunJob: steps 6 and 8 of a node-local run of a job that
// returns at once (the run's context, its watch, its id and previous
// tick, the report), on every core at once: what a burst pays per tick
// once its lock is decided.
func BenchmarkRunJob(b *testing.B) {
	s, err := New(Options{NodeID: "bench"}, []Schedule{{ID: "j", Spec: dailySpec{}, Hint: hints.NodeLocal,
		Job: JobFunc(func(context.Context, Tick) error { return nil })}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	if err := s.WaitIdle(context.Background()); err != nil {
		b.Fatal(err)
	}
	st := s.states["j"]
	at := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.runJob(&tick{st: st, def: st.def, at: at, winSet: true, win: time.Minute}, nil)
		}
	})
	b.StopTimer()
	cancel()
	<-done
}
