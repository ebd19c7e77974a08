package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A task that blocks (a long job) must never keep a queued task waiting:
// n tasks that each wait for all n to have started can only finish if
// the pool runs them all at once.
func TestPoolNeverQueuesATaskBehindABlockedOne(t *testing.T) {
	const n = 200
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var timedOut atomic.Bool
	p := newPool(func(task) {
		started.Done()
		select {
		case <-all:
		case <-ctx.Done():
			timedOut.Store(true)
		}
	})
	for range n {
		p.submit(task{})
	}
	p.close()
	if timedOut.Load() {
		t.Fatalf("not all %d blocking tasks ran at once: a task waited behind a blocked one", n)
	}
	if p.started != n {
		t.Errorf("started %d workers for %d tasks that all block, want %d", p.started, n, n)
	}
}

// close runs what is still queued, then ends every worker, parked ones
// included (goleak in TestMain checks nothing is left).
func TestPoolCloseRunsWhatIsQueued(t *testing.T) {
	var ran atomic.Int64
	gate := make(chan struct{})
	p := newPool(func(t task) {
		if t.f.lateness < 0 {
			<-gate // the first task holds its worker until the rest are queued
			return
		}
		ran.Add(1)
	})
	p.submit(task{f: fired{lateness: -1}})
	for range 100 {
		p.submit(task{})
	}
	close(gate)
	p.close()
	if n := ran.Load(); n != 100 {
		t.Fatalf("ran %d of 100 queued tasks before close returned", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parked != 0 || p.spinning != 0 || p.head != len(p.queue) {
		t.Errorf("after close: parked %d spinning %d queued %d, want 0 0 0", p.parked, p.spinning, len(p.queue)-p.head)
	}
}

// BenchmarkPoolBurst: 10,000 short tasks handed out 64 at a time, as the
// loop hands out a burst; each takes a shared mutex, as a tick does.
// Reports the workers started for them (fewer: less handoff).
func BenchmarkPoolBurst(b *testing.B) {
	const n = 10_000
	var mu sync.Mutex
	var shared int
	var wg sync.WaitGroup
	var started int
	for range b.N {
		p := newPool(func(task) {
			mu.Lock()
			shared++
			mu.Unlock()
			wg.Done()
		})
		wg.Add(n)
		batch := make([]task, popBatch)
		for i := 0; i < n; i += popBatch {
			p.submitAll(batch[:min(popBatch, n-i)])
		}
		wg.Wait()
		started += p.started
		p.close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/task")
	b.ReportMetric(float64(started)/float64(b.N), "workers")
}
