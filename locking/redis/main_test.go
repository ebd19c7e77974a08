package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// adminClient is a separate client on the test server, for looking at and
// tampering with keys behind the Locker's back. Closed when the test ends.
func adminClient(t testing.TB, url string) *goredis.Client {
	t.Helper()
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", RedactURL(url), err)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testPrefix returns a key prefix unique to this test and deletes every key
// under it (locks and fence counters) when the test ends.
func testPrefix(t testing.TB, admin *goredis.Client) string {
	t.Helper()
	p := "bext:test:" + testenv.UniqueName(t) + ":"
	t.Cleanup(func() { deleteKeys(t, admin, p) })
	return p
}

func deleteKeys(t testing.TB, admin *goredis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := admin.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleanup: scanning %s*: %v", prefix, err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		if err := admin.Del(ctx, keys[:n]...).Err(); err != nil {
			t.Errorf("cleanup: deleting keys under %s: %v", prefix, err)
			return
		}
		keys = keys[n:]
	}
}

// openLocker opens a Locker and closes it when the test ends (a second
// Close after the test's own is a no-op).
func openLocker(t testing.TB, opts Options) *Locker {
	t.Helper()
	l, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Logf("cleanup: Close: %v", err)
		}
	})
	return l
}

func mustLock(t testing.TB, l *Locker, key string, ttl time.Duration) *locking.Handle {
	t.Helper()
	h, err := l.TryLock(context.Background(), key, ttl)
	if err != nil || h == nil {
		t.Fatalf("TryLock(%q) = %v, %v; want a handle", key, h, err)
	}
	return h
}

// storedValue is what the server holds for key under l's prefix ("" if none).
func storedValue(t testing.TB, admin *goredis.Client, l *Locker, key string) string {
	t.Helper()
	v, err := admin.Get(context.Background(), l.lockKey(key)).Result()
	if errors.Is(err, goredis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s: %v", l.lockKey(key), err)
	}
	return v
}
