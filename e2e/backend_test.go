package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// backendKinds are the distributed backends every scenario runs against.
var backendKinds = []string{"redis", "pg"}

// Backend is the lock server of one test cluster. Nodes reach it through
// their own fault proxies (Cluster), so Stop and Start act on the server
// for everyone, and a node's proxy on that node alone.
type Backend struct {
	Kind   string // "redis", "pg" or "memory" (single-node scenarios)
	Name   string // the cluster's key prefix (redis) or namespace (pg)
	Target string // host:port of the real server

	t     testing.TB
	redis *redisServer // the private Redis; nil for pg

	mu      sync.Mutex
	stopped bool
	onStop  []func(stop bool) // pg: cut or heal every node's proxy
}

// newBackend gives t a backend of kind: a private redis-server on a free
// port, or the machine's Postgres under a namespace of its own.
func newBackend(t testing.TB, kind string) *Backend {
	t.Helper()
	b := &Backend{Kind: kind, Name: testenv.UniqueName(t), t: t}
	switch kind {
	case "redis":
		b.redis = startRedis(t) // fails the test when redis-server is missing

		b.Target = b.redis.addr
	case "pg":
		u := testenv.PGURL(t)
		cfg, err := pgx.ParseConfig(u)
		if err != nil {
			t.Fatalf("parsing the test Postgres URL: %v", err)
		}
		b.Target = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
		t.Cleanup(func() { dropFences(t, u, b.Name) })
	case "memory": // in the node's process: single-node scenarios only
	default:
		t.Fatalf("unknown backend %q", kind)
	}
	return b
}

// Section is the [locking] part of the config: the URL's host comes from
// E2E_BACKEND_ADDR, which each node gets as its own proxy's address.
func (b *Backend) Section(safety, skew time.Duration) string {
	return b.sectionOp(safety, skew, 0)
}

// sectionOp is Section with the backend's op_timeout set to op (zero: the
// scenarios' default, 500ms on Redis and 1s on Postgres).
func (b *Backend) sectionOp(safety, skew, op time.Duration) string {
	if op == 0 {
		op = 500 * time.Millisecond
		if b.Kind == "pg" {
			op = time.Second
		}
	}
	s := fmt.Sprintf("[locking]\nbackend = %q\nsafety_margin = %q\nmax_clock_skew = %q\n",
		b.Kind, safety.String(), skew.String())
	switch b.Kind {
	case "redis":
		s += fmt.Sprintf("[locking.redis]\nurl = \"redis://${E2E_BACKEND_ADDR}/0\"\nkey_prefix = %q\nop_timeout = %q\n",
			b.Name+":", op.String())
	case "pg":
		// Few sessions per node: other packages' tests share the server's
		// 100 connections with these clusters.
		s += fmt.Sprintf("[locking.pg]\nurl = \"postgres://postgres@${E2E_BACKEND_ADDR}/test?sslmode=disable&connect_timeout=2\"\nnamespace = %q\nmax_sessions = 4\nop_timeout = %q\n",
			b.Name, op.String())
	}
	return s
}

// Stop makes the backend unavailable to every node: the private Redis is
// shut down (its append-only file keeps locks and fences, as a production
// Redis with persistence would); Postgres is cut off at every node's
// proxy, so every session dies server-side and its locks are freed.
func (b *Backend) Stop() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	b.stopped = true
	if b.redis != nil {
		b.redis.stop(b.t)
		return
	}
	for _, f := range b.onStop {
		f(true)
	}
}

// Start brings a stopped backend back.
func (b *Backend) Start() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stopped {
		return
	}
	b.stopped = false
	if b.redis != nil {
		b.redis.start(b.t)
		return
	}
	for _, f := range b.onStop {
		f(false)
	}
}

// FlushAll makes the private Redis lose every key (locks and fencing
// counters), as a restart without persistence or a failover to a replica
// that lagged would.
func (b *Backend) FlushAll() {
	b.t.Helper()
	if b.redis == nil {
		b.t.Fatalf("FlushAll: %s is not Redis", b.Kind)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := redis.NewClient(&redis.Options{Addr: b.Target})
	defer cl.Close()
	if err := cl.FlushAll(ctx).Err(); err != nil {
		b.t.Fatalf("FLUSHALL: %v", err)
	}
}

// Stopped reports whether Stop was called without Start since.
func (b *Backend) Stopped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopped
}

// watchStop registers f to be called with true on Stop and false on Start
// (pg only: Redis is stopped for real).
func (b *Backend) watchStop(f func(stop bool)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onStop = append(b.onStop, f)
	if b.stopped && b.redis == nil {
		f(true)
	}
}

// dropFences removes the cluster's fence rows: the lock table is shared
// by every test namespace.
func dropFences(t testing.TB, url, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Logf("cleanup: connecting to Postgres: %v", err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DELETE FROM bext_lock_fences WHERE namespace = $1`, ns); err != nil {
		t.Logf("cleanup: deleting fences of %s: %v", ns, err)
	}
}

// redisServer is a private redis-server: its own port and directory, so a
// test may stop and restart it without disturbing anyone else. Unlike
// testenv.StartRedis it persists (an fsync-always append-only file): a
// backend outage here is a production Redis restarting with its data; data
// loss is a fault of its own (Backend.FlushAll).
type redisServer struct {
	addr, dir string
	node      *proctest.Node // nil while stopped
}

var redisReady = regexp.MustCompile(`Ready to accept connections`)

func startRedis(t testing.TB) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed (make test-services installs it): %v", err)
	}
	r := &redisServer{addr: redisAddr(t), dir: t.TempDir()}
	r.start(t) // proctest kills each process it started when t ends
	return r
}

// start runs redis-server with an fsync-always append-only file: a
// restart keeps every lock and fencing counter, so fences keep rising.
func (r *redisServer) start(t testing.TB) {
	t.Helper()
	_, port, _ := net.SplitHostPort(r.addr)
	// proctest reads stderr; Redis logs to stdout.
	script := fmt.Sprintf(`exec redis-server --bind 127.0.0.1 --port %s --dir %s --save '' --appendonly yes --appendfsync always --protected-mode no 1>&2`,
		port, r.dir)
	r.node = proctest.Start(t, "/bin/sh", nil, "-c", script)
	r.node.WaitLog(redisReady, 20*time.Second)
}

func (r *redisServer) stop(t testing.TB) {
	t.Helper()
	r.node.Signal(syscall.SIGTERM)
	if code := r.node.Wait(20 * time.Second); code != 0 {
		t.Logf("redis-server exited with %d", code)
	}
	r.node = nil
}

// redisAddr returns a 127.0.0.1 address for a private Redis, on a port
// the kernel will not hand to another test's client meanwhile.
func redisAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
}

// writeFile writes body to path or fails t.
func writeFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
