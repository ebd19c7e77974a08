package scheduler

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// Runs registered from many goroutines while the grace ends (cancelAll)
// are all cancelled with errShutdown, whichever list each picked and
// whether it was linked before or after that list was walked; runs that
// left before the end are not. A watch reused after remove links again
// cleanly (no stale neighbour from its previous run).
func TestRunSetCancelAllReachesEveryRun(t *testing.T) {
	for round := range 50 {
		var r runSet
		const workers, per = 8, 40
		type run struct {
			ctx context.Context
			w   *watch
		}
		runs := make([][]run, workers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				w := &watch{} // one watch per worker, reused as a pooled one is
				for i := range per {
					ctx, cancel := context.WithCancelCause(context.Background())
					w.cancel = cancel
					r.add(w)
					if i%2 == 0 {
						// A run that ends: it leaves the set, and its
						// watch is reused by the next one.
						r.remove(w)
						cancel(nil)
						*w = watch{}
						continue
					}
					// A run still going: it keeps its own watch.
					runs[g] = append(runs[g], run{ctx, w})
					w = &watch{}
				}
			}()
		}
		close(start)
		r.cancelAll()
		wg.Wait()
		for g := range runs {
			for i, rn := range runs[g] {
				if cause := context.Cause(rn.ctx); !errors.Is(cause, errShutdown) {
					t.Fatalf("round %d: run %d of worker %d still registered after cancelAll: cause %v, want errShutdown", round, i, g, cause)
				}
			}
		}
		// Every list holds exactly the runs still going, linked both ways.
		n := 0
		for i := range r.lists {
			var prev *watch
			for w := r.lists[i].head; w != nil; w = w.next {
				if w.prev != prev || w.list != &r.lists[i] {
					t.Fatalf("round %d: list %d badly linked", round, i)
				}
				prev = w
				n++
			}
		}
		if n != workers*per/2 {
			t.Fatalf("round %d: %d runs linked, want %d", round, n, workers*per/2)
		}
	}
}
