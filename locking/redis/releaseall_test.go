package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// TestReleaseAll: one ReleaseAll answers each handle as Release would: its
// own lock deleted; a lock that expired, or expired and was taken by
// another node, reported lost and left to its new holder; a handle named
// twice released once; a foreign handle refused alone.
func TestReleaseAll(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	a := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "a"})
	b := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "b"})
	ctx := context.Background()

	own := mustLock(t, a, "own", time.Minute)
	gone := mustLock(t, a, "gone", time.Minute)
	stolen := mustLock(t, a, "stolen", time.Minute)
	foreign := mustLock(t, b, "foreign", time.Minute)
	// Expire two of them behind a's back; b takes one.
	if err := admin.Del(ctx, a.lockKey("gone"), a.lockKey("stolen")).Err(); err != nil {
		t.Fatal(err)
	}
	thief := mustLock(t, b, "stolen", time.Minute)

	errs := a.ReleaseAll(ctx, []*locking.Handle{own, gone, stolen, foreign, own})
	if len(errs) != 5 {
		t.Fatalf("%d errors for 5 handles", len(errs))
	}
	if errs[0] != nil {
		t.Errorf("own lock: %v, want released", errs[0])
	}
	for i, what := range map[int]string{1: "expired lock", 2: "lock taken by another node", 4: "handle released earlier in the batch"} {
		if !errors.Is(errs[i], locking.ErrLockLost) || !strings.HasPrefix(errs[i].Error(), "locking/redis: release ") {
			t.Errorf("%s: %v, want Release's ErrLockLost", what, errs[i])
		}
	}
	if !errors.Is(errs[3], locking.ErrInvalid) {
		t.Errorf("foreign handle: %v, want ErrInvalid", errs[3])
	}
	// Only a's own lock went.
	if n, err := admin.Exists(ctx, a.lockKey("own")).Result(); err != nil || n != 0 {
		t.Errorf("own lock after ReleaseAll: EXISTS = %d, %v; want gone", n, err)
	}
	if v := storedValue(t, admin, b, "stolen"); v != b.storedValue(thief.Token(), thief.Fence()) {
		t.Errorf("the thief's lock after ReleaseAll = %q, want it untouched", v)
	}
	if err := b.Release(ctx, thief); err != nil {
		t.Errorf("the thief's Release: %v", err)
	}
	if err := b.Release(ctx, foreign); err != nil {
		t.Errorf("b's Release of its own lock: %v", err)
	}
	// Released handles are forgotten (Close has nothing left of them),
	// as after Release.
	a.mu.Lock()
	held := len(a.held)
	a.mu.Unlock()
	if held != 0 {
		t.Errorf("%d handles still tracked after ReleaseAll", held)
	}
}

// TestReleaseAllUnavailable: a round trip that fails is the error of each
// handle in it, as Release's failure is: ErrUnavailable, and the handles
// stay tracked (Close still tries them).
func TestReleaseAllUnavailable(t *testing.T) {
	t.Parallel()
	const opTimeout = 300 * time.Millisecond
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.Start(t, opt.Addr)
	l := openLocker(t, Options{URL: fmt.Sprintf("redis://%s/%d", proxy.Addr(), opt.DB), KeyPrefix: testPrefix(t, admin), OpTimeout: opTimeout})
	ctx := context.Background()
	h1, h2, h3 := mustLock(t, l, "one", time.Minute), mustLock(t, l, "two", time.Minute), mustLock(t, l, "three", time.Minute)

	proxy.Blackhole()
	single := l.Release(ctx, h3)
	errs := l.ReleaseAll(ctx, []*locking.Handle{h1, h2})
	for i, err := range append(errs, single) {
		if !errors.Is(err, locking.ErrUnavailable) || !strings.HasPrefix(err.Error(), "locking/redis: release ") {
			t.Errorf("handle %d over a stalled link: %v, want Release's ErrUnavailable", i, err)
		}
	}
	l.mu.Lock()
	held := len(l.held)
	l.mu.Unlock()
	if held != 3 {
		t.Errorf("%d handles tracked after failed releases, want 3", held)
	}
	proxy.Heal()
}

// TestReleaseAllRedisCluster: on a private three-master Redis Cluster,
// where the locks of a batch lie in different slots, TryLockTicks (a
// pipeline of tick.lua, which reads lock, mark and counter of one slot in
// one MGET) grants each key once and ReleaseAll (a pipeline of release.lua)
// gives each back, a lost one reported as such.
func TestReleaseAllRedisCluster(t *testing.T) {
	t.Parallel()
	rc := testenv.StartRedisCluster(t, 3, 0)
	l := openLocker(t, Options{URL: rc.URL(), KeyPrefix: "c:", OpTimeout: 10 * time.Second})
	if _, ok := l.client.(*goredis.ClusterClient); !ok {
		t.Fatalf("Open(%s) made a %T, want a Cluster client", rc.URL(), l.client)
	}
	ctx := context.Background()
	t0 := time.Now().Truncate(time.Second)
	var reqs []locking.TickRequest
	for i := range 20 {
		reqs = append(reqs, tickReq(fmt.Sprintf("k%d", i), t0))
	}
	answers, errs := l.TryLockTicks(ctx, reqs)
	hs := make([]*locking.Handle, len(reqs))
	for i, a := range answers {
		if errs[i] != nil || a.Verdict != locking.TickGranted {
			t.Fatalf("request %d: %v, %v; want granted", i, a.Verdict, errs[i])
		}
		hs[i] = a.Handle
	}
	again, errs := l.TryLockTicks(ctx, reqs)
	for i, a := range again {
		if errs[i] != nil || a.Verdict != locking.TickDone {
			t.Fatalf("request %d again: %v, %v; want done", i, a.Verdict, errs[i])
		}
	}
	if err := l.client.Del(ctx, l.lockKey("k3")).Err(); err != nil {
		t.Fatal(err)
	}
	for i, err := range l.ReleaseAll(ctx, hs) {
		switch {
		case i == 3 && !errors.Is(err, locking.ErrLockLost):
			t.Errorf("release of the lost lock: %v, want ErrLockLost", err)
		case i != 3 && err != nil:
			t.Errorf("release %d: %v", i, err)
		}
	}
	for i := range reqs {
		reqs[i].Tick = t0.Add(time.Second)
	}
	answers, errs = l.TryLockTicks(ctx, reqs)
	for i, a := range answers {
		if errs[i] != nil || a.Verdict != locking.TickGranted {
			t.Fatalf("request %d for the next tick: %v, %v; want granted (its lock released)", i, a.Verdict, errs[i])
		}
	}
}
