package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/lockertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)

	// Lockers made within one (sub)test share a prefix; Expire finds the
	// prefix of the test it is called in, or of the nearest parent.
	var mu sync.Mutex
	prefixes := map[string]string{}
	prefixFor := func(t testing.TB) string {
		mu.Lock()
		defer mu.Unlock()
		for name := t.Name(); ; {
			if p, ok := prefixes[name]; ok {
				return p
			}
			i := strings.LastIndex(name, "/")
			if i < 0 {
				break
			}
			name = name[:i]
		}
		p := testPrefix(t, admin)
		prefixes[t.Name()] = p
		return p
	}

	backend := lockertest.Backend{
		New: func(t testing.TB) locking.Locker {
			// A long OpTimeout: the suite checks the contract's semantics
			// (64 lockers dialling at once under -race on a shared 2-core
			// machine can take seconds); the timeout bounds are proved by
			// the fault tests.
			l, err := Open(Options{URL: url, KeyPrefix: prefixFor(t), Holder: "conformance", OpTimeout: 10 * time.Second})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return l
		},
		Expire: func(t testing.TB, key string) {
			lk := prefixFor(t) + "{" + key + "}"
			n, err := admin.Del(context.Background(), lk).Result()
			if err != nil || n != 1 {
				t.Fatalf("expiring %s: DEL = %d, %v; want 1 key deleted", lk, n, err)
			}
		},
		TTLExpiry: true,
		Parallel:  true, // each case has a key prefix of its own
		// The clock try-lock-tick decides on: the server's.
		Now: func() time.Time {
			now, err := admin.Time(context.Background()).Result()
			if err != nil {
				t.Fatalf("TIME: %v", err)
			}
			return now
		},
		ForgetMark: func(t testing.TB, key string) {
			mk := prefixFor(t) + "{" + key + "}" + markSuffix
			if err := admin.Del(context.Background(), mk).Err(); err != nil {
				t.Fatalf("forgetting the mark %s: %v", mk, err)
			}
		},
		EndLease: func(t testing.TB, r locking.TickRequest, d time.Duration) {
			lk := prefixFor(t) + "{" + r.Key + "}"
			if r.PerTick {
				lk += tickSuffix + strconv.FormatInt(r.Tick.UnixMicro(), 10)
			}
			if ok, err := admin.PExpire(context.Background(), lk, d).Result(); err != nil || !ok {
				t.Fatalf("ending the lease of %s: PEXPIRE = %v, %v; want the lock's TTL set", lk, ok, err)
			}
		},
	}
	lockertest.Run(t, backend)
	// The scheduler sends ticks that wait together through TryLockTicks
	// (ticks.lua), and releases through ReleaseAll: that path must answer
	// every rule of the mark exactly as TryLockTick does.
	batched := backend
	batched.New = func(t testing.TB) locking.Locker { return batchedLocker{backend.New(t).(*Locker)} }
	t.Run("batched", func(t *testing.T) { lockertest.RunTicks(t, batched) })
}

// batchedLocker answers TryLockTick through a one-request TryLockTicks,
// and Release through a one-handle ReleaseAll (releases.lua), the path of
// the scheduler's batched releases.
type batchedLocker struct{ *Locker }

func (b batchedLocker) TryLockTick(ctx context.Context, req locking.TickRequest) (locking.TickAnswer, error) {
	answers, errs := b.TryLockTicks(ctx, []locking.TickRequest{req})
	return answers[0], errs[0]
}

func (b batchedLocker) Release(ctx context.Context, h *locking.Handle) error {
	return b.ReleaseAll(ctx, []*locking.Handle{h})[0]
}

func TestTryLockContentionAndFence(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	a := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "node-a"})
	b := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "node-b"})
	ctx := context.Background()

	h1 := mustLock(t, a, "job", time.Minute)
	if h, err := b.TryLock(ctx, "job", time.Minute); h != nil || err != nil {
		t.Fatalf("TryLock on a held key = %v, %v; want (nil, nil): contention is not an error", h, err)
	}
	if h, err := a.TryLock(ctx, "job", time.Minute); h != nil || err != nil {
		t.Fatalf("second TryLock by the holder's Locker = %v, %v; want (nil, nil): not re-entrant", h, err)
	}
	if got, want := storedValue(t, admin, a, "job"), fmt.Sprintf("%s#%d|node-a", h1.Token(), h1.Fence()); got != want {
		t.Fatalf("stored value = %q, want token#fence|holder %q", got, want)
	}
	if err := a.Release(ctx, h1); err != nil {
		t.Fatalf("Release: %v", err)
	}
	h2 := mustLock(t, b, "job", time.Minute)
	if h2.Fence() <= h1.Fence() {
		t.Fatalf("fence after re-acquire = %d, want > %d", h2.Fence(), h1.Fence())
	}
	if h2.Token() == h1.Token() {
		t.Fatal("two acquisitions got the same token")
	}
}

func TestRenewExtendsFromNow(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	l := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin)})
	ctx := context.Background()
	h := mustLock(t, l, "k", time.Minute)
	// Shorten the lease behind the Locker's back; Renew must set it back
	// to the handle's full TTL.
	if err := admin.PExpire(ctx, l.lockKey("k"), 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx, h); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if pttl := admin.PTTL(ctx, l.lockKey("k")).Val(); pttl <= 5*time.Second {
		t.Fatalf("PTTL after Renew = %v, want the full minute back", pttl)
	}
}

func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	l := openLocker(t, Options{URL: url, KeyPrefix: prefix})
	other := openLocker(t, Options{URL: url, KeyPrefix: prefix})
	ctx := context.Background()
	for _, c := range []struct {
		key string
		ttl time.Duration
	}{{"", time.Second}, {"k", 0}, {"k", -time.Second}, {"a\nb", time.Second}, {strings.Repeat("x", locking.MaxKeyLen+1), time.Second}} {
		if h, err := l.TryLock(ctx, c.key, c.ttl); h != nil || !errors.Is(err, locking.ErrInvalid) {
			t.Errorf("TryLock(%.20q, %v) = %v, %v; want ErrInvalid", c.key, c.ttl, h, err)
		}
	}
	foreign := mustLock(t, other, "k", time.Minute)
	for name, h := range map[string]*locking.Handle{"nil": nil, "foreign": foreign} {
		if err := l.Renew(ctx, h); !errors.Is(err, locking.ErrInvalid) {
			t.Errorf("Renew(%s handle) = %v, want ErrInvalid", name, err)
		}
		if err := l.Release(ctx, h); !errors.Is(err, locking.ErrInvalid) {
			t.Errorf("Release(%s handle) = %v, want ErrInvalid", name, err)
		}
	}
	if v := storedValue(t, admin, other, "k"); !strings.HasPrefix(v, foreign.Token()) {
		t.Fatalf("a foreign Release touched the lock: value %q", v)
	}
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	l := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin)})
	h := mustLock(t, l, "held", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got, err := l.TryLock(ctx, "k", time.Minute); got != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("TryLock(cancelled) = %v, %v; want context.Canceled", got, err)
	}
	if err := l.Renew(ctx, h); !errors.Is(err, context.Canceled) {
		t.Errorf("Renew(cancelled) = %v, want context.Canceled", err)
	}
	if err := l.Release(ctx, h); !errors.Is(err, context.Canceled) {
		t.Errorf("Release(cancelled) = %v, want context.Canceled", err)
	}
	if storedValue(t, admin, l, "k") != "" {
		t.Error("TryLock with a cancelled context took the lock")
	}
	if storedValue(t, admin, l, "held") == "" {
		t.Error("Release with a cancelled context released the lock")
	}
}

func TestCloseReleasesHeldLocks(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	l := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin)})
	for _, k := range []string{"a", "b", "c"} {
		mustLock(t, l, k, time.Minute)
	}
	released := mustLock(t, l, "released", time.Minute)
	if err := l.Release(context.Background(), released); err != nil {
		t.Fatal(err)
	}
	// A cancelled context must not stop Close from giving locks back.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if v := storedValue(t, admin, l, k); v != "" {
			t.Errorf("lock %q still on the server after Close", k)
		}
	}
	bg := context.Background()
	if _, err := l.TryLock(bg, "d", time.Minute); !errors.Is(err, locking.ErrClosed) {
		t.Errorf("TryLock after Close = %v, want ErrClosed", err)
	}
	if err := l.Renew(bg, released); !errors.Is(err, locking.ErrClosed) {
		t.Errorf("Renew after Close = %v, want ErrClosed", err)
	}
	if err := l.Release(bg, released); !errors.Is(err, locking.ErrClosed) {
		t.Errorf("Release after Close = %v, want ErrClosed", err)
	}
	if err := l.Ping(bg); !errors.Is(err, locking.ErrClosed) {
		t.Errorf("Ping after Close = %v, want ErrClosed", err)
	}
	if _, err := l.List(bg); !errors.Is(err, locking.ErrClosed) {
		t.Errorf("List after Close = %v, want ErrClosed", err)
	}
	if err := l.Close(bg); err != nil {
		t.Errorf("second Close = %v, want nil (safe to call twice)", err)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	// A prefix with glob characters must still list only its own locks.
	prefix := testPrefix(t, admin) + "*[x]?"
	l := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "node-a pid 42"})
	other := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin) + "other:"})
	ctx := context.Background()
	mustLock(t, other, "not-mine", time.Minute)
	keys := []string{"plain", "with}brace", "ends:fence", "ünïcode"}
	fences := map[string]int64{}
	for _, k := range keys {
		fences[k] = mustLock(t, l, k, time.Minute).Fence()
	}
	h := mustLock(t, l, "released", time.Minute)
	if err := l.Release(ctx, h); err != nil {
		t.Fatal(err)
	}

	got, err := l.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(got) != len(keys) {
		t.Fatalf("List = %+v, want exactly %v", got, keys)
	}
	for _, info := range got {
		f, ok := fences[info.Key]
		if !ok {
			t.Errorf("List has %q, not a key this prefix holds", info.Key)
			continue
		}
		if info.Fence != f || info.Holder != "node-a pid 42" || info.TTLLeft <= 0 || info.TTLLeft > time.Minute {
			t.Errorf("List entry %+v, want fence %d, holder %q, 0 < TTLLeft <= 1m", info, f, "node-a pid 42")
		}
	}
}

func TestPing(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	l := openLocker(t, Options{URL: url})
	if err := l.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

// A resent acquire (its first reply lost) must answer with the fence it
// drew, not "held": the lock is ours.
func TestAcquireScriptIsIdempotentForItsOwnValue(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	ctx := context.Background()
	keys := []string{prefix + "{k}", prefix + "{k}" + fenceSuffix}
	run := func(token string) int64 {
		t.Helper()
		n, err := replyInt(acquireScript.Run(ctx, admin, keys, token, "|holder", int64(60000)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	first := run("token-1")
	if first < 1 {
		t.Fatalf("first acquire = %d, want a fence", first)
	}
	if again := run("token-1"); again != first {
		t.Fatalf("resent acquire = %d, want the same fence %d", again, first)
	}
	if other := run("token-2"); other != 0 {
		t.Fatalf("another value's acquire = %d, want 0 (held)", other)
	}
}

func TestReplyIntIsStrict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, v := range []any{"1", true, 1.0, []any{int64(1)}, nil} {
		cmd := goredis.NewCmd(ctx)
		cmd.SetVal(v)
		if n, err := replyInt(cmd); err == nil {
			t.Errorf("replyInt(%T %v) = %d, nil; want an error: only an integer reply is an answer", v, v, n)
		}
	}
	cmd := goredis.NewCmd(ctx)
	cmd.SetVal(int64(1))
	if n, err := replyInt(cmd); n != 1 || err != nil {
		t.Errorf("replyInt(int64 1) = %d, %v", n, err)
	}
}

func TestNegativeOpTimeoutIsInvalid(t *testing.T) {
	t.Parallel()
	if _, err := Open(Options{URL: "redis://127.0.0.1:1/0", OpTimeout: -time.Second}); !errors.Is(err, locking.ErrInvalid) {
		t.Fatalf("Open with a negative OpTimeout = %v, want ErrInvalid", err)
	}
}
