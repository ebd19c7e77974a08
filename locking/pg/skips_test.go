package pg

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	store "github.com/bext-dev/bext-scheduler/cluster"
)

func testSkip(schedule string, i int, node string) store.Skip {
	tick := t0.Add(time.Duration(i) * time.Minute)
	return store.Skip{Schedule: schedule, Tick: tick, Node: node, Reason: store.SkipPaused,
		Note: fmt.Sprintf("note %d", i), At: tick.Add(3 * time.Millisecond)}
}

func (c *cluster) storedSkips(schedule string) int64 {
	return c.count(`SELECT count(*) FROM bext_skips WHERE namespace = $1 AND schedule = $2`, c.ns, schedule)
}

// TestSkipsTrimDeferred: skips recorded one at a time are trimmed once
// past keep plus a tenth, back to keep, as runs are (recordSkipsSQL),
// not on every call.
func TestSkipsTrimDeferred(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()
	const keep = 20 // threshold 22
	var sizes []int64
	for i := range 60 {
		if err := l.RecordSkips(ctx, []store.Skip{testSkip("a", i, "n1")}, keep); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, c.storedSkips("a"))
	}
	var trims int
	for i, n := range sizes {
		if n > trimThreshold(keep) {
			t.Fatalf("after %d skips %d are stored, over %d", i+1, n, trimThreshold(keep))
		}
		if i > 0 && n != sizes[i-1]+1 {
			trims++
		}
	}
	// 60 skips: trimmed at skips 23, 26, ..., 59, every slack+1 = 3.
	if trims != 13 {
		t.Errorf("sizes %v: %d trims, want 13 (one every 3 skips)", sizes, trims)
	}
	got, err := l.Skips(ctx, "a", keep)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range got {
		if want := t0.Add(time.Duration(59-i) * time.Minute); !k.Tick.Equal(want) {
			t.Fatalf("Skips[%d] at %v, want %v", i, k.Tick, want)
		}
	}
}

// TestSkipsConcurrent: nodes recording overlapping ticks of one schedule
// at once, in batches in different orders, neither deadlock nor fail
// (the trim locks SKIP LOCKED, the inserts go in key order); the newest
// keep ticks recorded are all kept, once each, and the next call trims
// whatever the concurrent batches left over the bound.
func TestSkipsConcurrent(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	const keep, nodes, calls, batch = 10, 4, 30, 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		recorded = map[int]bool{}
	)
	errs := make(chan error, nodes)
	for n := range nodes {
		l := c.open(Options{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(n), 7))
			for call := range calls {
				ks := make([]store.Skip, batch)
				for j := range ks {
					i := call*4 + rng.IntN(batch)
					ks[j] = testSkip("a", i, fmt.Sprintf("n%d", n))
					mu.Lock()
					recorded[i] = true
					mu.Unlock()
				}
				if err := l.RecordSkips(ctx, ks, keep); err != nil {
					errs <- fmt.Errorf("node %d call %d: %w", n, call, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	l := c.open(Options{})
	newest := (calls-1)*4 + batch - 1
	if err := l.RecordSkips(ctx, []store.Skip{testSkip("a", newest+1, "last")}, keep); err != nil {
		t.Fatal(err)
	}
	if n := c.storedSkips("a"); n > trimThreshold(keep) {
		t.Errorf("%d skips stored after the concurrent batches and one more, want at most %d", n, trimThreshold(keep))
	}
	got, err := l.Skips(ctx, "a", keep)
	if err != nil {
		t.Fatal(err)
	}
	want := []int{newest + 1}
	for i := newest; len(want) < keep; i-- {
		if recorded[i] {
			want = append(want, i)
		}
	}
	if len(got) != keep {
		t.Fatalf("%d skips, want %d", len(got), keep)
	}
	for j, k := range got {
		if !k.Tick.Equal(t0.Add(time.Duration(want[j]) * time.Minute)) {
			t.Fatalf("Skips[%d] at %v, want tick %d (the newest %d ticks recorded, newest first: %v)", j, k.Tick, want[j], keep, want)
		}
	}
}
