package pg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bext-dev/bext-scheduler/locking"
)

// session is one open connection with the backend pid it was probed on.
type session struct {
	conn *pgx.Conn
	pid  uint32
}

// closeTimeout bounds closing one connection (sending Terminate).
const closeTimeout = time.Second

// configureSessions sets what every session needs: a bounded time to notice
// a dead peer on both ends of the socket, and a name in pg_stat_activity.
// Settings already in the URL win.
func configureSessions(cfg *pgx.ConnConfig, opTimeout time.Duration) {
	idle := max(opTimeout, time.Second)
	interval := max(opTimeout/3, time.Second)
	const count = 3
	userTimeout := 2 * opTimeout
	d := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: idle, Interval: interval, Count: count},
		Control:         userTimeoutControl(userTimeout),
	}
	cfg.DialFunc = d.DialContext
	// The server's side: Postgres drops a vanished client's session, and so
	// frees its locks, within about idle + count*interval.
	params := map[string]string{
		"application_name":        "bext-scheduler",
		"tcp_keepalives_idle":     strconv.Itoa(int(idle / time.Second)),
		"tcp_keepalives_interval": strconv.Itoa(int(interval / time.Second)),
		"tcp_keepalives_count":    strconv.Itoa(count),
		"tcp_user_timeout":        strconv.Itoa(int(userTimeout / time.Millisecond)),
		// Lock sessions write only fencing rows, and a fence is floored at
		// the database clock (sql.go), so a crash that forgets the last
		// writes cannot hand out a fence twice: waiting for fsync on every
		// TryLock would buy nothing and cost most of its time.
		"synchronous_commit": "off",
	}
	for k, v := range params {
		if _, set := cfg.RuntimeParams[k]; !set {
			cfg.RuntimeParams[k] = v
		}
	}
}

// acquire takes an idle session or, below MaxSessions, connects a new one.
// reused says the session came from the idle list (it may have died there).
func (l *Locker) acquire(ctx context.Context) (s *session, reused bool, err error) {
	l.mu.Lock()
	if n := len(l.idle); n > 0 {
		s = l.idle[n-1]
		l.idle[n-1] = nil
		l.idle = l.idle[:n-1]
		l.mu.Unlock()
		return s, true, nil
	}
	if l.open >= l.opts.MaxSessions {
		l.mu.Unlock()
		return nil, false, fmt.Errorf("%w (%d of %d pinned by held locks or in use): %w",
			ErrNoSession, l.opts.MaxSessions, l.opts.MaxSessions, locking.ErrUnavailable)
	}
	l.open++
	l.mu.Unlock()
	s, err = l.connect(ctx)
	if err != nil {
		l.mu.Lock()
		l.open--
		l.mu.Unlock()
		return nil, false, err
	}
	return s, false, nil
}

// putIdle returns a healthy session for reuse, or closes it once the Locker
// is closed.
func (l *Locker) putIdle(s *session) {
	l.mu.Lock()
	if !l.closed {
		l.idle = append(l.idle, s)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.discard(context.Background(), s)
}

// discard closes a session in doubt (never reused) and frees its slot.
// Closing it ends every lock it held.
func (l *Locker) discard(ctx context.Context, s *session) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	_ = s.conn.Close(ctx) // the server ends the session either way
	l.mu.Lock()
	l.open--
	l.mu.Unlock()
}

// connect opens and probes a new session. ctx carries the OpTimeout bound.
func (l *Locker) connect(ctx context.Context) (*session, error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: pg: connecting: %w", locking.ErrUnavailable, err)
	}
	pid, err := probeSession(ctx, conn)
	if err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_ = conn.Close(closeCtx)
		return nil, err
	}
	return &session{conn: conn, pid: pid}, nil
}

// probe is what a new session showed about itself; verdict decides.
type probe struct {
	serverVersion string // the ParameterStatus the server (or pooler) sent
	lockPID       uint32 // backend of the statement taking the probe lock
	locked        bool   // whether it got the probe lock
	checkPID      uint32 // backend of the next statement
	seen          bool   // whether that statement saw the lock on its backend
}

// verdict returns nil for a real session, else an error wrapping
// ErrTransactionPooler that says what gave the pooler away.
func (p probe) verdict() error {
	if err := checkServerVersion(p.serverVersion); err != nil {
		return err
	}
	switch {
	case p.lockPID != p.checkPID:
		return fmt.Errorf("%w (two consecutive statements ran on backends %d and %d)", ErrTransactionPooler, p.lockPID, p.checkPID)
	case !p.locked:
		return fmt.Errorf("%w (backend %d's own probe lock was held by another session)", ErrTransactionPooler, p.lockPID)
	case !p.seen:
		return fmt.Errorf("%w (a session lock taken on backend %d was gone by the next statement)", ErrTransactionPooler, p.lockPID)
	}
	return nil
}

// checkServerVersion refuses a server_version that names PgBouncer (its
// admin console reports e.g. "1.21.0/bouncer").
func checkServerVersion(v string) error {
	if strings.Contains(strings.ToLower(v), "bouncer") {
		return fmt.Errorf("%w (the server reports version %q)", ErrTransactionPooler, v)
	}
	return nil
}

// probeSession checks that conn is a real session: a session lock taken by
// one statement must still be there, on the same backend, in the next.
// Behind transaction pooling consecutive statements may land on different
// server connections. It returns the backend pid.
func probeSession(ctx context.Context, conn *pgx.Conn) (uint32, error) {
	p := probe{serverVersion: conn.PgConn().ParameterStatus("server_version")}
	if err := checkServerVersion(p.serverVersion); err != nil {
		return 0, err // do not even query a pooler's admin console
	}
	simple := pgx.QueryExecModeSimpleProtocol
	if err := conn.QueryRow(ctx, probeLockSQL, simple).Scan(&p.lockPID, &p.locked); err != nil {
		return 0, fmt.Errorf("%w: pg: probing a new session: %w", locking.ErrUnavailable, err)
	}
	if err := conn.QueryRow(ctx, probeCheckSQL, simple).Scan(&p.checkPID, &p.seen); err != nil {
		return 0, fmt.Errorf("%w: pg: probing a new session: %w", locking.ErrUnavailable, err)
	}
	if err := p.verdict(); err != nil {
		return 0, err
	}
	var unlocked bool
	if err := conn.QueryRow(ctx, probeUnlockSQL, simple).Scan(&unlocked); err != nil {
		return 0, fmt.Errorf("%w: pg: probing a new session: %w", locking.ErrUnavailable, err)
	}
	if !unlocked {
		return 0, fmt.Errorf("%w (the probe lock vanished before its unlock)", ErrTransactionPooler)
	}
	return p.lockPID, nil
}

// ensureSchema creates bext_lock_fences once per Locker, if it is missing.
func (l *Locker) ensureSchema(ctx context.Context, s *session) error {
	if l.schemaOK.Load() {
		return nil
	}
	l.schemaMu.Lock()
	defer l.schemaMu.Unlock()
	if l.schemaOK.Load() {
		return nil
	}
	var exists bool
	if err := s.conn.QueryRow(ctx, tableExistsSQL).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := s.conn.Exec(ctx, createTableSQL); err != nil {
			return err
		}
	}
	l.schemaOK.Store(true)
	return nil
}

// withSession runs fn on an idle (or new) session under OpTimeout, or on a
// throwaway connection when all MaxSessions are in use. Errors wrap
// locking.ErrUnavailable.
func (l *Locker) withSession(ctx context.Context, fn func(context.Context, *pgx.Conn) error) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return locking.ErrClosed
	}
	l.ops.Add(1)
	l.mu.Unlock()
	defer l.ops.Done()

	ctx, cancel := context.WithTimeout(ctx, l.opts.OpTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		s, reused, err := l.acquire(ctx)
		if errors.Is(err, ErrNoSession) {
			conn, err := pgx.ConnectConfig(ctx, l.cfg)
			if err != nil {
				return fmt.Errorf("%w: pg: connecting: %w", locking.ErrUnavailable, err)
			}
			err = fn(ctx, conn)
			closeCtx, cancelClose := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
			_ = conn.Close(closeCtx)
			cancelClose()
			if err != nil {
				return fmt.Errorf("%w: pg: %w", locking.ErrUnavailable, err)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(ctx, s.conn); err != nil {
			l.discard(ctx, s)
			if reused && attempt == 0 && isConnError(err) && ctx.Err() == nil {
				continue
			}
			return fmt.Errorf("%w: pg: %w", locking.ErrUnavailable, err)
		}
		l.putIdle(s)
		return nil
	}
}

// isConnError tells a broken connection (worth one retry on a fresh one)
// from an answer of the server.
func isConnError(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 57P01 admin_shutdown etc.: the server ended this session.
		return strings.HasPrefix(pgErr.Code, "57P") || strings.HasPrefix(pgErr.Code, "08")
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
