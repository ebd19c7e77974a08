package ops_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// BenchmarkStatus1k measures what `status`, the API's status and the page
// cost the backend at 1,000 minutely require_global schedules, each with
// its last 5 runs (the newest a success) and its mark: the reads per
// schedule (last run, pause, mark, recent acts) and the cluster-wide ones
// (nodes, queues). Reported: ns per schedule alongside the op's total.
func BenchmarkStatus1k(b *testing.B) {
	const n = 1000
	for _, be := range opstest.Backends() {
		b.Run(be.Name, func(b *testing.B) {
			_, st := be.New(b)
			m := time.Now().UTC().Truncate(time.Minute)
			scheds := make([]scheduler.Schedule, n)
			var batch []cluster.Run
			for i := range n {
				id := fmt.Sprintf("job-%04d", i)
				scheds[i] = minutely(id, hints.RequireGlobal)
				for k := -5; k <= -1; k++ {
					tick := m.Add(time.Duration(k) * time.Minute)
					batch = append(batch, cluster.Run{Schedule: id, Tick: tick, Node: "n1", Result: "success",
						StartedAt: tick.Add(time.Millisecond), Attempts: 1, RunID: fmt.Sprint(id, k)})
				}
				raiseMark(b, st, id, m.Add(-time.Minute))
			}
			if err := st.RecordRuns(b.Context(), batch, 100); err != nil {
				b.Fatal(err)
			}
			svc := ops.New(st, scheds, ops.Options{Clock: func() time.Time { return m }, Keep: 100})
			b.ResetTimer()
			for b.Loop() {
				s, err := svc.Status(b.Context())
				if err != nil || len(s.Schedules) != n {
					b.Fatalf("Status: %d schedules, %v", len(s.Schedules), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/schedule")
		})
	}
}
