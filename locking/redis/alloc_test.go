package redis

import (
	"context"
	"testing"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// maxLockReleaseAllocs is the bound on a try-lock + release: the
// fenced floor (bare go-redis running the same scripts) takes 21 on go-redis
// v9.23, so the Locker's own handle, token and bookkeeping get at most 4.
const maxLockReleaseAllocs = 25

// TestTryLockReleaseAllocs holds the lean path to its allocation bound, so
// that a change putting a timer context, a boxed argument or a string
// build back on it fails here rather than in a benchmark nobody reads.
func TestTryLockReleaseAllocs(t *testing.T) {
	url := testenv.RedisURL(t)
	l := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, adminClient(t, url)), Holder: "node-1 pid 4242"})
	ctx := context.Background()
	var err error
	got := testing.AllocsPerRun(200, func() {
		h, e := l.TryLock(ctx, "allocs", benchTTL)
		if e != nil || h == nil {
			err = e
			return
		}
		err = l.Release(ctx, h)
	})
	if err != nil {
		t.Fatalf("try-lock + release: %v", err)
	}
	t.Logf("%.1f allocations per try-lock + release", got)
	if got > maxLockReleaseAllocs {
		t.Errorf("%.1f allocations per try-lock + release, want at most %d", got, maxLockReleaseAllocs)
	}
}
