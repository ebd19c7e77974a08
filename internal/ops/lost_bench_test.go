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

// BenchmarkLostTicks10k measures what bext_scheduler_ticks_lost costs the
// backend: one op audits 10,000 minutely require_global schedules' recent
// windows (LostTicks), each with its last 20 runs in history (1 KiB of
// output each) and its mark. The cluster does this once per [history]
// audit_every, split among the live nodes. Reported: ns per schedule
// (the backend's work per schedule per audit, three reads) alongside the
// op's total.
func BenchmarkLostTicks10k(b *testing.B) {
	const n = 10000
	for _, be := range opstest.Backends() {
		b.Run(be.Name, func(b *testing.B) {
			_, st := be.New(b)
			now := time.Now().UTC()
			m := now.Truncate(time.Minute)
			ids := make([]string, n)
			scheds := make([]scheduler.Schedule, n)
			out := string(make([]byte, 1024))
			var batch []cluster.Run
			for i := range n {
				ids[i] = fmt.Sprintf("job-%05d", i)
				scheds[i] = minutely(ids[i], hints.RequireGlobal)
				for k := -20; k <= -1; k++ {
					tick := m.Add(time.Duration(k) * time.Minute)
					batch = append(batch, cluster.Run{Schedule: ids[i], Tick: tick, Node: "n1", Result: "success",
						StartedAt: tick.Add(time.Millisecond), Attempts: 1, RunID: fmt.Sprint(ids[i], k), OutputTail: out})
				}
				if len(batch) >= 2000 || i == n-1 {
					if err := st.RecordRuns(b.Context(), batch, 100); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			for _, id := range ids {
				raiseMark(b, st, id, m.Add(-time.Minute))
			}
			svc := ops.New(st, scheds, ops.Options{Clock: func() time.Time { return m.Add(ops.AuditGrace / 2) }, Keep: 100})
			b.ResetTimer()
			for b.Loop() {
				lost, err := svc.LostTicks(b.Context(), ids)
				if err != nil || len(lost) != 0 {
					b.Fatalf("LostTicks: %v, %v", len(lost), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/schedule")
		})
	}
}
