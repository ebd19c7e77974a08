// Package testenv gives tests the real Redis and Postgres they run against.
//
// URLs come from BEXT_TEST_REDIS_URL and BEXT_TEST_PG_URL, defaulting to the
// servers on this machine. A server that does not answer fails the test: a
// test that needs a backend never passes by skipping (`make test` starts the
// servers first; see scripts/test-services).
package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Defaults for the servers this machine runs.
const (
	DefaultRedisURL = "redis://127.0.0.1:6379/0"
	DefaultPGURL    = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// RunVar names the variable `make test` sets to a value of its own on every
// run. A test that reads it (through Uncached) has it among the inputs go
// test's cache compares, so its result is never reused from an earlier run:
// what it checked lives outside the package (a server's state, a binary
// built from other packages), which the cache cannot see. Packages that
// touch neither are cached as usual.
const RunVar = "BEXT_TEST_RUN"

// Uncached makes the calling test's result depend on RunVar (see there).
// Every helper here that hands out a server calls it.
func Uncached() { _ = os.Getenv(RunVar) }

// RedisURL returns the test Redis URL, failing t if nothing listens there.
func RedisURL(t testing.TB) string {
	t.Helper()
	Uncached()
	u := envOr("BEXT_TEST_REDIS_URL", DefaultRedisURL)
	mustDial(t, "Redis", u, "6379")
	return u
}

// PGURL returns the test Postgres URL, failing t if nothing listens there.
func PGURL(t testing.TB) string {
	t.Helper()
	Uncached()
	u := envOr("BEXT_TEST_PG_URL", DefaultPGURL)
	mustDial(t, "Postgres", u, "5432")
	return u
}

// UniqueName returns a name unique to this test and moment, safe as a key
// prefix or a schema name: lower-case letters, digits and underscores.
func UniqueName(t testing.TB) string {
	name := strings.ToLower(t.Name())
	var b strings.Builder
	for _, r := range name {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 40 {
		s = s[:40]
	}
	// The time keeps names apart across runs and processes; the counter
	// keeps apart two names taken in one test (two clusters of one test
	// must never share keys), which a coarse clock alone would not.
	return fmt.Sprintf("t_%s_%d_%d", s, time.Now().UnixNano()%1e12, uniq.Add(1))
}

var uniq atomic.Int64

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// mustDial checks that a TCP listener answers at the URL's host, so a
// missing server is one clear failure instead of a timeout deep in a test.
func mustDial(t testing.TB, what, raw, defPort string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return // keyword-style DSNs: let the driver report problems itself
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), defPort)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		t.Fatalf("%s is not reachable at %s (%v): start it (make test does) or set the BEXT_TEST_*_URL variable", what, host, err)
	}
	c.Close()
}
