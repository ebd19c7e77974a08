package pg

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bext-dev/bext-scheduler/locking"
)

// countingConn counts the message batches the client sends: each Write is
// one flush of pgx's buffer, so one round trip of a request/response query.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestOneRoundTrip: once a session is warm (its statements prepared),
// TryLock (lock and fence together) and Release each send one request.
func TestOneRoundTrip(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 1})
	var writes atomic.Int64
	l.cfg.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
		return countingConn{Conn: conn, writes: &writes}, nil
	}
	ctx := context.Background()
	h := mustLock(t, l, "warm")
	if err := l.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	writes.Store(0)
	h = mustLock(t, l, "k")
	if n := writes.Load(); n != 1 {
		t.Errorf("TryLock sent %d requests, want 1", n)
	}
	writes.Store(0)
	if err := l.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	if n := writes.Load(); n != 1 {
		t.Errorf("Release sent %d requests, want 1", n)
	}
}

// TestTickOneRoundTrip: on a warm session, TryLockTick (lock, mark, fence,
// pause) and its Release each send one request: two round trips a tick.
func TestTickOneRoundTrip(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 1})
	var writes atomic.Int64
	l.cfg.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
		return countingConn{Conn: conn, writes: &writes}, nil
	}
	ctx := context.Background()
	tick := c.dbNow().Truncate(time.Second)
	ans := mustTick(t, l, tickReq("warm", tick), locking.TickGranted, "warm-up")
	if err := l.Release(ctx, ans.Handle); err != nil {
		t.Fatal(err)
	}
	for i, v := range []locking.TickVerdict{locking.TickGranted, locking.TickDone} {
		writes.Store(0)
		ans = mustTick(t, l, tickReq("k", tick), v, "tick")
		if n := writes.Load(); n != 1 {
			t.Errorf("TryLockTick (%v) sent %d requests, want 1", v, n)
		}
		if i == 0 {
			writes.Store(0)
			if err := l.Release(ctx, ans.Handle); err != nil {
				t.Fatal(err)
			}
			if n := writes.Load(); n != 1 {
				t.Errorf("Release of a tick lock sent %d requests, want 1", n)
			}
		}
	}
}
