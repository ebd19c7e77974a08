package pg

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// gateConn is the socket under every connection this package opens. For
// most of them it passes everything through. A lock session's (guarded)
// decides who may end the session, because ending it frees every advisory
// lock on it at once, those of holders that did nothing wrong included.
//
// pgx ends a connection by itself whenever a statement on it fails to
// complete (a timeout, a broken read, a protocol surprise): it sends a
// cancel request, then Terminate, then closes the socket (asyncClose).
// On a shared session that would free the locks of every other holder
// multiplexed on it, each counting on its lock until its last renewal plus
// MaxLease, which nobody told it had been cut short: another node was
// granted a key whose holder still ran. So, on a guarded gate, once a read
// or write failed, or pgx closed the connection on its own, nothing more
// goes out or comes in (pgx sees a closed socket, and its Terminate is
// not sent), and its Close is ignored: the Locker abandons the session
// (Locker.abandon) and closes the socket itself (shut) once no holder can
// still count on a lock there. The cancel request pgx sends on another
// connection only cancels the statement in flight; the session lives on.
type gateConn struct {
	net.Conn

	failed  atomic.Bool // no more traffic: I/O failed, pgx gave up, or abandoned
	guarded atomic.Bool // a lock session: only shut really closes it
	ending  atomic.Bool // the Locker closes it (closeConn): pgx's Terminate may go
	pg      atomic.Pointer[pgconn.PgConn]

	mu   sync.Mutex
	shut bool
}

// errGivenUp is what a gate that stopped traffic answers pgx.
var errGivenUp = fmt.Errorf("locking/pg: session given up: %w", net.ErrClosed)

// gateDial wraps dial's connections in a gateConn.
func gateDial(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &gateConn{Conn: c}, nil
	}
}

// gateOf returns conn's gate, nil if it has none (a test's own dialer).
func gateOf(conn *pgx.Conn) *gateConn {
	nc := conn.PgConn().Conn()
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	g, _ := nc.(*gateConn)
	return g
}

// guard makes g a lock session's: from now on only the Locker ends it.
func (g *gateConn) guard(pc *pgconn.PgConn) {
	g.pg.Store(pc)
	g.guarded.Store(true)
}

// stopped reports, for a Write, whether traffic must stop: it failed
// before, or pgx closed the connection on its own. pgx writes on the
// goroutine running the statement, which also sets its status, or, once
// closed, on the one it then starts to send Terminate (asyncClose), so
// reading IsClosed there is ordered after the status was set.
func (g *gateConn) stopped() bool {
	if g.failed.Load() {
		return true
	}
	if !g.guarded.Load() || g.ending.Load() {
		return false
	}
	if pc := g.pg.Load(); pc != nil && pc.IsClosed() {
		g.failed.Store(true)
		return true
	}
	return false
}

// Read checks failed alone: pgx reads on a goroutine of its own too
// (bgreader), where its connection's status may be changing; after pgx
// closed on its own it writes (Terminate) before it reads (to drain), so
// Write has stopped the traffic by then.
func (g *gateConn) Read(b []byte) (int, error) {
	if g.failed.Load() {
		return 0, errGivenUp
	}
	n, err := g.Conn.Read(b)
	if err != nil && g.guarded.Load() && !g.ending.Load() {
		g.failed.Store(true)
	}
	return n, err
}

func (g *gateConn) Write(b []byte) (int, error) {
	if g.stopped() {
		return 0, errGivenUp
	}
	n, err := g.Conn.Write(b)
	if err != nil && g.guarded.Load() && !g.ending.Load() {
		g.failed.Store(true)
	}
	return n, err
}

// Close closes the socket, unless g is a lock session's that pgx gave up
// on its own: the Locker decides when that one ends (shutNow).
func (g *gateConn) Close() error {
	if g.guarded.Load() && !g.ending.Load() {
		g.failed.Store(true)
		return nil
	}
	return g.shutNow()
}

// abandon stops g's traffic (a statement in flight fails at once) but
// keeps the socket, and so the server's session and its locks, open until
// shutNow.
func (g *gateConn) abandon() {
	g.failed.Store(true)
	_ = g.Conn.SetDeadline(time.Now())
}

// shutNow closes the socket (once): the server ends the session and frees
// its locks.
func (g *gateConn) shutNow() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		return nil
	}
	g.shut = true
	return g.Conn.Close()
}
