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

// replyDelay holds every chunk this long in the proxy: long enough for the
// test to see the script's effect on the server and cut the link while the
// reply is still held, so the reply is lost after the script ran.
const replyDelay = 300 * time.Millisecond

type tickResult struct {
	ans locking.TickAnswer
	err error
}

// loseReply runs call through proxy, waits until the script has taken
// lockKey on the server (seen through admin), then cuts the link before
// the held reply is forwarded. With heal, the link comes back at once (the
// client's own retry finds it); without, it stays cut until call returns.
// It returns call's result and the fence the first run stored.
func loseReply(t *testing.T, proxy *faultproxy.Proxy, admin *goredis.Client, lockKey string, heal bool,
	call func() tickResult) (tickResult, int64) {
	t.Helper()
	ctx := context.Background()
	proxy.Delay(replyDelay)
	done := make(chan tickResult, 1)
	go func() { done <- call() }()

	// The server cannot tell us when the script ran; we ask it.
	var stored string
	for deadline := time.Now().Add(10 * time.Second); ; {
		v, err := admin.Get(ctx, lockKey).Result()
		if err == nil {
			stored = v
			break
		}
		if !errors.Is(err, goredis.Nil) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call never took %s", lockKey)
		}
		select {
		case r := <-done:
			t.Fatalf("the call returned before taking %s: %+v", lockKey, r)
		case <-time.After(5 * time.Millisecond):
		}
	}
	proxy.Cut() // the reply, held by the delay, is dropped
	if heal {
		proxy.Heal()
	}
	r := <-done
	fence, ok := valueFence(stored)
	if !ok {
		t.Fatalf("stored value %q carries no fence", stored)
	}
	return r, fence
}

// TestResentTickAnsweredGranted: the rule "a resent call is answered from
// its own lock". A try-lock-tick whose reply is lost after the server ran
// it took the lock and moved the mark; its resend must be granted with the
// fence it drew, never done (which would lose the tick).
func TestResentTickAnsweredGranted(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	prefix := testPrefix(t, admin)
	ctx := context.Background()
	open := func(t *testing.T, proxy *faultproxy.Proxy) *Locker {
		// Registered after the proxy: Close runs before the proxy stops.
		l := openLocker(t, Options{
			URL:       fmt.Sprintf("redis://%s/%d", proxy.Addr(), opt.DB),
			KeyPrefix: prefix,
			OpTimeout: 10 * time.Second, // the delays, not the timeout, are under test
			Holder:    "sender",
		})
		if err := l.Ping(ctx); err != nil { // a connection made before the delay
			t.Fatal(err)
		}
		return l
	}
	// The delayed round trips take seconds: a skew that keeps T current.
	tickReq := func(key string, tick time.Time) locking.TickRequest {
		r := tickReq(key, tick)
		r.MaxSkew = time.Minute
		return r
	}

	// go-redis does not retry by itself (url.go, noRetries): the
	// connection ends (EOF) before the reply, and the call fails, not
	// definite, though the server applied it. A retry of its own would
	// apply it a second time behind the caller's back. The caller resends
	// with its token (and Resend), and is answered from its own lock.
	t.Run("no client retry", func(t *testing.T) {
		proxy := faultproxy.Start(t, opt.Addr)
		l := open(t, proxy)
		req := tickReq("retried", time.Now())
		tok, err := locking.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		req.Token = tok
		r, fence := loseReply(t, proxy, admin, l.lockKey("retried"), true, func() tickResult {
			a, err := l.TryLockTick(ctx, req)
			return tickResult{a, err}
		})
		if !errors.Is(r.err, locking.ErrUnavailable) || r.ans.Handle != nil {
			t.Fatalf("TryLockTick whose first reply was lost = %v, %v; want an error wrapping ErrUnavailable (no client retry)", r.ans.Verdict, r.err)
		}
		req.Resend = true
		a, err := l.TryLockTick(ctx, req)
		if err != nil || a.Verdict != locking.TickGranted || a.Handle.Fence() != fence {
			t.Fatalf("the caller's resend = %v, %v; want granted with the fence the first run drew, %d", a.Verdict, err, fence)
		}
		if err := l.Release(ctx, a.Handle); err != nil {
			t.Fatalf("Release of the resent call's handle: %v", err)
		}

		// The same for plain TryLock (acquire.lua): failed, not retried.
		var h *locking.Handle
		r, _ = loseReply(t, proxy, admin, l.lockKey("plain"), true, func() tickResult {
			var err error
			h, err = l.TryLock(ctx, "plain", time.Minute)
			return tickResult{err: err}
		})
		if !errors.Is(r.err, locking.ErrUnavailable) || h != nil {
			t.Fatalf("TryLock whose first reply was lost = %v, %v; want an error wrapping ErrUnavailable (no client retry)", h, r.err)
		}
	})

	// The scheduler's own resend: the link stays down until the call
	// fails, then the caller resends with the same Token.
	t.Run("caller resend", func(t *testing.T) {
		proxy := faultproxy.Start(t, opt.Addr)
		l := open(t, proxy)
		token, err := locking.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		req := tickReq("resent", time.Now())
		req.Token = token
		r, fence := loseReply(t, proxy, admin, l.lockKey("resent"), false, func() tickResult {
			a, err := l.TryLockTick(ctx, req)
			return tickResult{a, err}
		})
		if !errors.Is(r.err, locking.ErrUnavailable) {
			t.Fatalf("TryLockTick over a cut link = %v, %v; want ErrUnavailable", r.ans.Verdict, r.err)
		}
		proxy.Heal()

		// Without the token it would be done: the tick lost by its winner.
		other := req
		other.Token = ""
		mustTick(t, l, other, locking.TickDone)

		// The lease the caller believes it has counts from the resend.
		if err := admin.PExpire(ctx, l.lockKey("resent"), 5*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		a := mustTick(t, l, req, locking.TickGranted)
		if pttl := admin.PTTL(ctx, l.lockKey("resent")).Val(); pttl <= 5*time.Second {
			t.Errorf("lease after the resend = %v, want renewed to the TTL %v", pttl, req.TTL)
		}
		if a.Handle.Fence() != fence || a.Handle.Token() != token {
			t.Fatalf("resend with the same token: fence %d, want %d drawn by the first call", a.Handle.Fence(), fence)
		}
		if err := l.Renew(ctx, a.Handle); err != nil {
			t.Fatalf("Renew of the resent call's handle: %v", err)
		}
		// Per-tick locks: the resend gets its own fence even though a
		// later tick's lock drew a higher one meanwhile.
		pt := tickReq("per-tick", time.Now())
		pt.PerTick, pt.Token = true, token
		first := mustTick(t, l, pt, locking.TickGranted)
		later := tickReq("per-tick", pt.Tick.Add(time.Millisecond))
		later.PerTick = true
		mustTick(t, l, later, locking.TickGranted)
		if again := mustTick(t, l, pt, locking.TickGranted); again.Handle.Fence() != first.Handle.Fence() {
			t.Fatalf("resent per-tick call: fence %d, want %d", again.Handle.Fence(), first.Handle.Fence())
		}
	})

	t.Run("bad token", func(t *testing.T) {
		l := openLocker(t, Options{URL: url, KeyPrefix: prefix})
		for _, tok := range []string{"a#1", "a|b", "a\n"} {
			req := tickReq("bad", time.Now())
			req.Token = tok
			if _, err := l.TryLockTick(ctx, req); !errors.Is(err, locking.ErrInvalid) {
				t.Errorf("TryLockTick with token %q = %v, want ErrInvalid", tok, err)
			}
		}
	})
}

// TestTurn3LateReplyLosesGrantedTick: a try-lock-tick whose reply comes
// after OpTimeout was granted on the server (lock taken, mark raised and
// published). The caller drew the token itself and resends the same
// request with it: the resend is granted with the first grant's fence, so
// the tick runs, while node B, asking the same T with its own token, is
// not granted.
func TestTurn3LateReplyLosesGrantedTick(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	prefix := testPrefix(t, admin)
	ctx := context.Background()
	proxy := faultproxy.Start(t, opt.Addr)
	a := openLocker(t, Options{URL: fmt.Sprintf("redis://%s/%d", proxy.Addr(), opt.DB),
		KeyPrefix: prefix, OpTimeout: 300 * time.Millisecond, Holder: "node-a"})
	if err := a.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	b := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "node-b"})
	req := tickReq("late", time.Now())
	req.MaxSkew = time.Minute
	if req.Token, err = locking.NewToken(); err != nil {
		t.Fatal(err)
	}
	proxy.Delay(200 * time.Millisecond)
	_, err = a.TryLockTick(ctx, req)
	proxy.Delay(0)
	if err == nil {
		t.Skip("reply came in time")
	}
	// The server cannot tell us when the script ran; we ask it.
	var stored string
	for deadline := time.Now().Add(5 * time.Second); stored == ""; {
		if time.Now().After(deadline) {
			t.Fatal("the script never ran on the server")
		}
		time.Sleep(10 * time.Millisecond)
		stored = storedValue(t, admin, a, "late")
	}
	fence, ok := valueFence(stored)
	if !ok {
		t.Fatalf("stored value %q carries no fence", stored)
	}
	other := req
	other.Token = "" // node B, same T, its own token
	if ans, err := b.TryLockTick(ctx, other); err != nil || ans.Verdict == locking.TickGranted {
		t.Fatalf("node B at the granted T = %v, %v; want done or contended", ans.Verdict, err)
	}
	again, err := a.TryLockTick(ctx, req) // A resends the same request, same token
	if err != nil || again.Verdict != locking.TickGranted {
		t.Fatalf("granted on the server, yet A's resend with the same token is told %v, %v: it runs nowhere", again.Verdict, err)
	}
	if again.Handle.Fence() != fence {
		t.Fatalf("A's resend granted with fence %d, want the first grant's %d", again.Handle.Fence(), fence)
	}
	if err := a.Release(ctx, again.Handle); err != nil {
		t.Fatal(err)
	}
}
