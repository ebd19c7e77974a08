package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// closedAddr returns an address nothing listens on: a port the kernel gave
// us a moment ago, closed again.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestUnreachableAtTryLock(t *testing.T) {
	t.Parallel()
	const opTimeout = 500 * time.Millisecond
	l := openLocker(t, Options{URL: "redis://" + closedAddr(t) + "/0", OpTimeout: opTimeout})
	ctx := context.Background()

	start := time.Now()
	h, err := l.TryLock(ctx, "k", time.Minute)
	elapsed := time.Since(start)
	if h != nil || !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("TryLock with Redis down = %v, %v; want an error wrapping ErrUnavailable", h, err)
	}
	// A bound, not a speed test: a dead backend must answer within the
	// operation timeout (plus scheduling slack), never hang a tick.
	if elapsed >= 2*opTimeout {
		t.Fatalf("TryLock with Redis down took %v, want < 2 × OpTimeout (%v)", elapsed, 2*opTimeout)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("error %v does not keep the network cause", err)
	}
	if err := l.Ping(ctx); !errors.Is(err, locking.ErrUnavailable) {
		t.Errorf("Ping with Redis down = %v, want ErrUnavailable", err)
	}
}

func TestRedisRestartedWhileHeld(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t) // private: this test restarts it
	a := openLocker(t, Options{URL: srv.URL(), KeyPrefix: "t:", OpTimeout: time.Second, Holder: "a"})
	ctx := context.Background()

	// A few acquisitions: rising fences, each at least the server's clock.
	h0 := mustLock(t, a, "job", time.Minute)
	if err := a.Release(ctx, h0); err != nil {
		t.Fatal(err)
	}
	h := mustLock(t, a, "job", time.Minute)
	if h.Fence() <= h0.Fence() {
		t.Fatalf("fence of the second acquisition = %d, want above the first's %d", h.Fence(), h0.Fence())
	}
	if now := time.Now().UnixMicro(); h0.Fence() < now-int64(time.Hour/time.Microsecond) || h0.Fence() > now+int64(time.Hour/time.Microsecond) {
		t.Fatalf("first fence %d is not seeded from the server clock (now %d µs)", h0.Fence(), now)
	}

	srv.Stop()
	srv.Start() // same port, empty dataset

	err := a.Renew(ctx, h)
	if !errors.Is(err, locking.ErrLockLost) && !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("Renew after Redis lost its data = %v, want ErrLockLost or ErrUnavailable", err)
	}
	b := openLocker(t, Options{URL: srv.URL(), KeyPrefix: "t:", OpTimeout: time.Second, Holder: "b"})
	hb := mustLock(t, b, "job", time.Minute)
	// The fencing counter went with the data, but restarts from the
	// server's clock: the new holder's fence is above the stale holder's,
	// so a fenced resource still refuses the stale one and accepts it.
	if hb.Fence() <= h.Fence() {
		t.Fatalf("fence after Redis lost its data = %d, not above the stale holder's %d", hb.Fence(), h.Fence())
	}
	// The first Locker recovered by itself: it works again without a reopen.
	if _, err := a.TryLock(ctx, "other", time.Minute); err != nil {
		t.Fatalf("TryLock on the first Locker after the restart = %v, want it to recover", err)
	}
}

func TestStalledConnectionRenewTimesOutBeforeLease(t *testing.T) {
	t.Parallel()
	const (
		opTimeout = 300 * time.Millisecond
		ttl       = 3 * time.Second // > 2 × opTimeout, with room for slow machines
	)
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.Start(t, opt.Addr)
	// Registered after the proxy, so its cleanup (Close) runs before the
	// proxy stops.
	l := openLocker(t, Options{
		URL:       fmt.Sprintf("redis://%s/%d", proxy.Addr(), opt.DB),
		KeyPrefix: testPrefix(t, admin),
		OpTimeout: opTimeout,
	})
	ctx := context.Background()
	h := mustLock(t, l, "job", ttl)

	proxy.Blackhole()
	start := time.Now()
	err = l.Renew(ctx, h)
	elapsed := time.Since(start)
	if !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("Renew over a stalled link = %v, want ErrUnavailable", err)
	}
	t.Logf("Renew over a stalled link failed after %v (OpTimeout %v)", elapsed, opTimeout)
	if elapsed >= 2*opTimeout {
		t.Fatalf("Renew over a stalled link took %v, want < 2 × OpTimeout (%v)", elapsed, 2*opTimeout)
	}
	// The error came back while the lease still runs on the server, so a
	// scheduler cancels the job before another node can take the lock.
	pttl, err := admin.PTTL(ctx, l.lockKey("job")).Result()
	if err != nil || pttl <= 0 {
		t.Fatalf("PTTL when Renew failed = %v, %v; want the lease still running", pttl, err)
	}

	// A caller deadline tighter than OpTimeout running out mid-call is the
	// backend being too slow: ErrUnavailable, and still a deadline error.
	short, cancel := context.WithTimeout(ctx, opTimeout/3)
	defer cancel()
	if h, err := l.TryLock(short, "other", ttl); h != nil || !errors.Is(err, locking.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock over a stalled link with a short deadline = %v, %v; want ErrUnavailable and DeadlineExceeded", h, err)
	}

	// Once the link heals, the same Locker works again and Close gives the
	// lock back.
	proxy.Heal()
	if err := l.Close(ctx); err != nil {
		t.Fatalf("Close after Heal: %v", err)
	}
	if v := storedValue(t, admin, l, "job"); v != "" {
		t.Fatalf("lock still on the server after Close: %q", v)
	}
}

func TestExpiredUnderHolder(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	a := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "a"})
	b := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "b"})
	ctx := context.Background()

	// Let the TTL really run out: PEXPIRE 1, then poll the server until the
	// key is gone.
	expire := func(key string) {
		t.Helper()
		lk := a.lockKey(key)
		if err := admin.PExpire(ctx, lk, time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); ; {
			n, err := admin.Exists(ctx, lk).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not expire", lk)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}

	h := mustLock(t, a, "job", time.Minute)
	expire("job")
	if err := a.Renew(ctx, h); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("Renew after expiry = %v, want ErrLockLost", err)
	}
	if err := a.Release(ctx, h); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("Release after expiry = %v, want ErrLockLost", err)
	}

	stale := mustLock(t, a, "job", 10*time.Second)
	expire("job")
	const bTTL = time.Minute
	hb := mustLock(t, b, "job", bTTL)
	if err := a.Renew(ctx, stale); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("stale Renew = %v, want ErrLockLost", err)
	}
	if err := a.Release(ctx, stale); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("stale Release = %v, want ErrLockLost", err)
	}
	if got, want := storedValue(t, admin, b, "job"), b.storedValue(hb.Token(), hb.Fence()); got != want {
		t.Fatalf("value on the server = %q, want the new holder's %q", got, want)
	}
	// The stale Renew (10s) must not have shortened B's one-minute lease.
	if pttl := admin.PTTL(ctx, b.lockKey("job")).Val(); pttl <= 10*time.Second {
		t.Fatalf("PTTL of the new holder's lock = %v: the stale handle touched it", pttl)
	}
	if hb.Fence() <= stale.Fence() {
		t.Fatalf("new holder's fence %d not above the stale one's %d", hb.Fence(), stale.Fence())
	}
}
