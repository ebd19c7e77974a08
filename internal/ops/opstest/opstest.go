// Package opstest gives the tests of ops, the API and the CLI the real
// backends they run against (memory, Redis, Postgres), each as an
// ops.Store in a namespace of its own, cleaned up at the test's end.
package opstest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/locking/pg"
	"github.com/bext-dev/bext-scheduler/locking/redis"
)

// Backend opens a fresh namespace of one backend kind for a test.
type Backend struct {
	Name string
	// New returns the [locking] table of a config naming the namespace
	// (with the backend's URL) and a store opened on it. Both are the
	// test's own; everything is removed at its end.
	New func(t testing.TB) (locking string, st ops.Store)
}

// Backends lists every real backend.
func Backends() []Backend {
	return []Backend{{"memory", newMemory}, {"redis", newRedis}, {"pg", newPG}}
}

// Shared lists the backends several processes share: Redis and Postgres.
func Shared() []Backend { return Backends()[1:] }

// ForEach runs f once per backend, as a subtest named after it.
func ForEach(t *testing.T, f func(t *testing.T, st ops.Store)) {
	for _, b := range Backends() {
		t.Run(b.Name, func(t *testing.T) {
			_, st := b.New(t)
			f(t, st)
		})
	}
}

// Memory is a fresh in-process store.
func Memory(t testing.TB) ops.Store {
	_, st := newMemory(t)
	return st
}

func newMemory(t testing.TB) (string, ops.Store) {
	l := memory.New()
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return "[locking]\nbackend = \"memory\"\n", l
}

func newRedis(t testing.TB) (string, ops.Store) {
	url := testenv.RedisURL(t)
	prefix := "bext:test:" + testenv.UniqueName(t) + ":"
	l, err := redis.Open(redis.Options{URL: url, KeyPrefix: prefix, Holder: "test", OpTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = l.Close(ctx)
		opt, err := goredis.ParseURL(url)
		if err != nil {
			return
		}
		c := goredis.NewClient(opt)
		defer c.Close()
		keys, err := c.Keys(ctx, strings.ReplaceAll(prefix, "*", `\*`)+"*").Result()
		if err == nil && len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return fmt.Sprintf("[locking]\nbackend = \"redis\"\n[locking.redis]\nurl = %q\nkey_prefix = %q\n", url, prefix), l
}

func newPG(t testing.TB) (string, ops.Store) {
	url := testenv.PGURL(t)
	ns := testenv.UniqueName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := pg.Open(ctx, pg.Options{URL: url, Namespace: ns, Holder: "test", OpTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = l.Close(ctx)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		for _, table := range []string{"bext_runs", "bext_run_counts", "bext_nodes", "bext_requests", "bext_accepted", "bext_taken", "bext_taken_heard", "bext_skips", "bext_actions", "bext_stops"} {
			var exists bool
			if conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists) == nil && exists {
				_, _ = conn.Exec(ctx, `DELETE FROM `+table+` WHERE namespace = $1`, ns)
			}
		}
	})
	return fmt.Sprintf("[locking]\nbackend = \"pg\"\n[locking.pg]\nurl = %q\nnamespace = %q\n", url, ns), l
}
