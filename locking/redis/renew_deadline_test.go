package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// TestRenewHonoursCallersDeadline: over a stalled link, Renew returns by
// its caller's deadline when that comes before OpTimeout (the scheduler's
// renewal deadline: the end of the lease, or the next renewal).
func TestRenewHonoursCallersDeadline(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.Start(t, opt.Addr)
	l := openLocker(t, Options{
		URL:       fmt.Sprintf("redis://%s/%d", proxy.Addr(), opt.DB),
		KeyPrefix: testPrefix(t, admin),
		OpTimeout: 5 * time.Second,
	})
	h := mustLock(t, l, "job", time.Minute)
	proxy.Blackhole()
	defer proxy.Heal()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = l.Renew(ctx, h)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Renew with a 300ms deadline returned %v after %v", err, took)
	}
	if !errors.Is(err, locking.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Renew over a stalled link = %v, want ErrUnavailable or a deadline", err)
	}
}
