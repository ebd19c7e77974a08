package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/batch"
	"github.com/bext-dev/bext-scheduler/locking"
)

// gatedReleaser answers each release after gate lets it (or at once when
// gate is nil), and records the batches.
type gatedReleaser struct {
	gate  chan struct{}
	fail  error // when set, every handle's error
	short bool  // answer one handle fewer than asked

	mu      sync.Mutex
	batches [][]*locking.Handle
	asked   int // handles in batches so far
}

func (g *gatedReleaser) ReleaseAll(ctx context.Context, hs []*locking.Handle) []error {
	g.mu.Lock()
	g.batches = append(g.batches, hs)
	g.asked += len(hs)
	g.mu.Unlock()
	if g.gate != nil {
		<-g.gate
	}
	n := len(hs)
	if g.short {
		n--
	}
	errs := make([]error, n)
	for i := range errs {
		if g.fail != nil {
			// Each handle's own error, as Release would word it.
			errs[i] = fmt.Errorf("test: release %v: %w", hs[i], g.fail)
		}
	}
	return errs
}

func newTestReleaser(g *gatedReleaser) *releaser {
	return newReleaser(struct {
		Locker
		locking.ReleaseBatcher
	}{nil, g}, nil)
}

// releaseAll releases n handles (keys 0..n-1) through r at once and
// returns each one's error.
func releaseAll(r *releaser, n int) ([]error, func()) {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := locking.NewHandle(r, fmt.Sprint(i), "t", int64(i+1), time.Minute, nil)
			_, errs[i] = r.Do(context.Background(), h)
		}()
	}
	return errs, wg.Wait
}

// waitReleasesQueued spins until every one of n releases is in a batch or
// in the queue (nothing signals that: they come from goroutines just
// started).
func waitReleasesQueued(t *testing.T, r *releaser, g *gatedReleaser, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		q, _ := r.Pending()
		g.mu.Lock()
		asked := g.asked
		g.mu.Unlock()
		if q+asked == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d queued and %d asked of %d releases", q, asked, n)
		}
		runtime.Gosched()
	}
}

// TestReleaserLoneReleaseIsSentAtOnce: a release with nothing else under
// way goes to the backend by itself, in the caller's own call: no timer
// holds it back to wait for others.
func TestReleaserLoneReleaseIsSentAtOnce(t *testing.T) {
	g := &gatedReleaser{}
	r := newTestReleaser(g)
	for i := range 3 {
		h := locking.NewHandle(r, "k", "t", int64(i+1), time.Minute, nil)
		if _, err := r.Do(context.Background(), h); err != nil {
			t.Fatal(err)
		}
		// do returned: the release was answered, so it was sent.
		if len(g.batches) != i+1 || len(g.batches[i]) != 1 || g.batches[i][0] != h {
			t.Fatalf("after %d lone releases: batches %v; want each sent alone", i+1, g.batches)
		}
	}
	if _, n := r.Pending(); n != 0 {
		t.Errorf("%d senders left after lone releases", n)
	}
}

// TestReleaserGroupsWaitingReleases: while batch.MaxSenders batches are on their
// way, the other releases wait, and the next batch takes all of them.
func TestReleaserGroupsWaitingReleases(t *testing.T) {
	const n = 200
	g := &gatedReleaser{gate: make(chan struct{})}
	r := newTestReleaser(g)
	errs, wait := releaseAll(r, n)
	waitReleasesQueued(t, r, g, n)
	close(g.gate)
	wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	if len(g.batches) != batch.MaxSenders+1 {
		t.Errorf("%d batches for %d releases, %d of them sent before the others queued; want %d", len(g.batches), n, batch.MaxSenders, batch.MaxSenders+1)
	}
	seen := map[string]bool{}
	for _, b := range g.batches {
		for _, h := range b {
			if seen[h.Key()] {
				t.Errorf("handle %s released twice", h.Key())
			}
			seen[h.Key()] = true
		}
	}
	if len(seen) != n {
		t.Errorf("%d handles released, want %d", len(seen), n)
	}
}

// TestReleaserErrorIsEachHandles: each handle gets its own error from a
// failed batch, and a handle the backend left unanswered gets
// errShortRelease, so each is reported as its own failed release.
func TestReleaserErrorIsEachHandles(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    *gatedReleaser
	}{
		{"failed", &gatedReleaser{gate: make(chan struct{}), fail: locking.ErrUnavailable}},
		{"short", &gatedReleaser{gate: make(chan struct{}), short: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 50
			r := newTestReleaser(tc.g)
			errs, wait := releaseAll(r, n)
			waitReleasesQueued(t, r, tc.g, n)
			close(tc.g.gate)
			wait()
			failed := 0
			for i, err := range errs {
				if err == nil {
					continue
				}
				failed++
				if !errors.Is(err, locking.ErrUnavailable) {
					t.Fatalf("release %d: %v; want it to wrap ErrUnavailable", i, err)
				}
				if tc.g.fail != nil && err.Error() != fmt.Sprintf("test: release %v: %v", handleOf(tc.g, fmt.Sprint(i)), locking.ErrUnavailable) {
					t.Errorf("release %d: %v; want its own error", i, err)
				}
			}
			want := n // every handle of every failed batch
			if tc.g.short {
				want = len(tc.g.batches) // the last handle of each batch
			}
			if failed != want {
				t.Errorf("%d releases failed, want %d", failed, want)
			}
		})
	}
}

// handleOf returns the handle of key that g was asked to release.
func handleOf(g *gatedReleaser, key string) *locking.Handle {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, b := range g.batches {
		for _, h := range b {
			if h.Key() == key {
				return h
			}
		}
	}
	return nil
}
