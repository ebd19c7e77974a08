package pg

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bext-dev/bext-scheduler/locking"
)

// closeTimeout bounds closing one connection (sending Terminate).
const closeTimeout = time.Second

// sessionTimes are the dead-peer settings every session gets, as applied
// (whole seconds for the keepalives, milliseconds for the user timeout).
type sessionTimes struct {
	idle, interval time.Duration
	count          int
	userTimeout    time.Duration
	// set is the SET list run after connecting: the settings above (for
	// Postgres's side of the socket) and the rest a lock session needs,
	// less those the URL sets itself.
	set [][2]string
}

// maxLease is the soonest the server drops a silent peer (see MaxLease).
func (t sessionTimes) maxLease() time.Duration {
	return min(t.userTimeout, t.idle+time.Duration(t.count)*t.interval)
}

// configureSessions sets what every session needs: a bounded time to notice
// a dead peer on both ends of the socket, and a name in pg_stat_activity.
// Settings already in the URL win. Only application_name goes in the
// startup packet (every pooler accepts it); the others are applied after
// connecting (probeSQL), because a pooler such as PgBouncer refuses a
// startup packet with parameters it does not know.
func configureSessions(cfg *pgx.ConnConfig, opTimeout time.Duration) sessionTimes {
	t := sessionTimes{
		idle:        max(opTimeout, time.Second).Truncate(time.Second),
		interval:    max(opTimeout/3, time.Second).Truncate(time.Second),
		count:       3,
		userTimeout: (2 * opTimeout).Truncate(time.Millisecond),
	}
	d := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: t.idle, Interval: t.interval, Count: t.count},
		Control:         userTimeoutControl(t.userTimeout),
	}
	cfg.DialFunc = gateDial(d.DialContext)
	if _, set := cfg.RuntimeParams["application_name"]; !set {
		cfg.RuntimeParams["application_name"] = "bext-scheduler"
	}
	// The server's side: Postgres drops a vanished client's session, and so
	// frees its locks, within MaxLease.
	for _, kv := range [][2]string{
		{"tcp_keepalives_idle", strconv.Itoa(int(t.idle / time.Second))},
		{"tcp_keepalives_interval", strconv.Itoa(int(t.interval / time.Second))},
		{"tcp_keepalives_count", strconv.Itoa(t.count)},
		{"tcp_user_timeout", strconv.Itoa(int(t.userTimeout / time.Millisecond))},
		// A server-wide idle_session_timeout would end a lock's session
		// between two renewals.
		{"idle_session_timeout", "0"},
		// Plain locks write only fencing rows, and a fence is floored at
		// the database clock (sql.go), so a crash that forgets the last
		// writes cannot hand out a fence twice: waiting for fsync on every
		// TryLock would buy nothing and cost most of its time. The
		// statements that raise a tick mark or set a pause force it on for
		// themselves.
		{"synchronous_commit", "off"},
		// The lock statements are a few index lookups each, but the
		// planner multiplies its per-column guesses for (namespace, key)
		// through the tick statement's CTEs: with a few hundred thousand
		// rows in bext_lock_fences its cost estimate passed jit_above_cost
		// and every tick statement spent 1 to 3.5 s compiling (EXPLAIN
		// ANALYZE: 3.5 s in its first Result node, 0.8 ms with jit off).
		{"jit", "off"},
		// The same guesses made the plan cache keep planning the tick
		// statement afresh on every execution (a custom plan looked
		// cheaper than the generic one): 2 to 9 ms a tick against 0.7
		// to 1.1 ms with the generic plan, measured on a table of
		// ~350,000 rows. Every statement here is a handful of key
		// lookups, whose plan does not depend on the values.
		{"plan_cache_mode", "force_generic_plan"},
	} {
		if _, set := cfg.RuntimeParams[kv[0]]; !set {
			t.set = append(t.set, kv)
		}
	}
	return t
}

// probeSQL applies the session settings (those this server knows:
// current_setting(name, true) is null for e.g. idle_session_timeout before
// Postgres 14) and takes the probe lock, in one round trip. The values are
// digits and words from configureSessions, never input.
//
// Not a join with pg_settings, which said the same: that view builds a row
// for each of the server's ~350 settings, and on a new backend, whose
// catalog caches are cold, the statement cost the server 10 to 12 ms of
// CPU against 4 to 5 ms this way (BenchmarkSessionOpen; a bare connect
// costs about 20), on every session a Locker opens: for `lock run`, on
// every run.
func (t sessionTimes) probeSQL() string {
	var b strings.Builder
	b.WriteString(`WITH s AS MATERIALIZED (SELECT count(set_config(v.name, v.setting, false)) AS n FROM (VALUES `)
	for i, kv := range t.set {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "('%s', '%s')", kv[0], kv[1])
	}
	if len(t.set) == 0 {
		b.WriteString("('', '')")
	}
	b.WriteString(`) AS v(name, setting) WHERE current_setting(v.name, true) IS NOT NULL)
SELECT pg_backend_pid(), pg_try_advisory_lock(1650817140, pg_backend_pid()) FROM s`)
	return b.String()
}

// closeConn closes conn within closeTimeout, at once when Close's deadline
// passed (l.abort): the server ends the session either way. Only for a
// connection no holder counts on (a probe, the listener, a session with no
// locks, or every session once Close gave its locks up): it ends the
// session even if pgx gave it up before (gateConn).
func closeConn(l *Locker, ctx context.Context, conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	stop := context.AfterFunc(l.abort, cancel)
	defer stop()
	g := gateOf(conn)
	if g != nil {
		g.ending.Store(true)
	}
	_ = conn.Close(ctx)
	if g != nil {
		_ = g.shutNow()
	}
}

// connect opens and probes a new session. ctx carries the OpTimeout bound.
//
// A session must be a Postgres backend of its own for as long as it is
// open. Postgres's BackendKeyData names the backend, so a pid there that
// differs from pg_backend_pid() means a pooler sits in between (PgBouncer
// sends its own). That is fine only if no other client can ever run on the
// server connection carrying our locks: the pooler must pool sessions and
// reset a server connection (DISCARD ALL, which drops advisory locks)
// before handing it to another client. leakTest checks exactly that.
func (l *Locker) connect(ctx context.Context) (*session, error) {
	s, keyPID, err := l.dialProbe(ctx)
	if err != nil {
		return nil, err
	}
	if keyPID == s.pid {
		return s, nil // Postgres itself
	}
	s0pid := s.pid
	if known, err := l.pooler.get(); known {
		if err != nil {
			closeConn(l, ctx, s.conn)
			return nil, err
		}
		return s, nil
	}
	// The test needs the pool's server connections free of us: with a
	// session pool of one, s would hold the only one.
	closeConn(l, ctx, s.conn)
	s, err = l.leakTest(ctx)
	if errors.Is(err, ErrTransactionPooler) {
		err = fmt.Errorf("%w (the startup BackendKeyData names backend %d, pg_backend_pid() is %d)", err, keyPID, s0pid)
	}
	if err != nil && !errors.Is(err, locking.ErrUnavailable) && !errors.Is(err, locking.ErrPermission) {
		l.pooler.set(err)
	} else if err == nil {
		l.pooler.set(nil)
	}
	return s, err
}

// dialProbe connects, applies the session settings and checks the
// session (probeSession). It returns the pid of the startup
// BackendKeyData along with the session.
func (l *Locker) dialProbe(ctx context.Context) (*session, uint32, error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		if strings.Contains(err.Error(), "unsupported startup parameter") {
			return nil, 0, fmt.Errorf("locking/pg: %w: connecting: a pooler refused a startup parameter of [locking.pg] url (set it with SET in the pooler's connect_query, or drop it): %w", locking.ErrUnavailable, err)
		}
		return nil, 0, fmt.Errorf("locking/pg: %w: connecting: %w", failure(err), err)
	}
	pid, err := l.probeSession(ctx, conn)
	if err != nil {
		closeConn(l, ctx, conn)
		return nil, 0, err
	}
	return newSession(conn, pid), conn.PgConn().PID(), nil
}

// leakTest finds out whether a session lock outlives the client that took
// it, behind a pooler: one client takes a lock and disconnects, a second
// one looks for the lock. A session pool resets the server connection
// (DISCARD ALL) before anyone else gets it, so the lock is soon gone; a
// transaction or statement pool never resets it, so it stays, held by
// whichever server connection ran the statement. It returns the second
// client as the new session when the pooler passes.
func (l *Locker) leakTest(ctx context.Context) (*session, error) {
	nonce := rand.Int32N(1<<31-2) + 1
	simple := pgx.QueryExecModeSimpleProtocol
	t, _, err := l.dialProbe(ctx)
	if err != nil {
		return nil, err
	}
	var ok bool
	err = t.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1::int, $2::int)`, simple, leakClass, nonce).Scan(&ok)
	closeConn(l, ctx, t.conn)
	if err != nil {
		return nil, fmt.Errorf("locking/pg: %w: testing the pooler: %w", locking.ErrUnavailable, err)
	}
	s, _, err := l.dialProbe(ctx)
	if err != nil {
		return nil, err
	}
	// The pooler resets the first client's server connection after it
	// left, and Postgres ends a backend after its client left: both take
	// a moment, and neither tells anyone, so ask until the lock is gone.
	wait, cancel := context.WithTimeout(ctx, leakWait)
	defer cancel()
	for {
		var held, mine bool
		err := s.conn.QueryRow(ctx, `SELECT count(*) > 0, coalesce(bool_or(pid = pg_backend_pid()), false) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 2`,
			simple, leakClass, nonce).Scan(&held, &mine)
		if err != nil {
			closeConn(l, ctx, s.conn)
			return nil, fmt.Errorf("locking/pg: %w: testing the pooler: %w", locking.ErrUnavailable, err)
		}
		if !held {
			return s, nil
		}
		select {
		case <-time.After(10 * time.Millisecond):
			continue
		case <-wait.Done():
		}
		if mine {
			_, _ = s.conn.Exec(ctx, `SELECT pg_advisory_unlock($1::int, $2::int)`, simple, leakClass, nonce)
		}
		closeConn(l, ctx, s.conn)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("locking/pg: %w: testing the pooler: %w", locking.ErrUnavailable, ctx.Err())
		}
		return nil, fmt.Errorf("%w (a pooler answers for Postgres, and a session lock outlived the client that took it by %v: transaction or statement pooling, or session pooling without server_reset_query)",
			ErrTransactionPooler, leakWait)
	}
}

// leakWait is how long leakTest waits for a left client's lock to go.
const leakWait = time.Second

// poolerRecheck is how long a pooler's verdict is trusted before the next
// new session tests it again.
const poolerRecheck = time.Minute

// poolerCache remembers the last leakTest verdict, so a session pool does
// not cost three connections per session, nor a transaction pool a leaked
// test lock per attempt.
type poolerCache struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

func (c *poolerCache) get() (known bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) > poolerRecheck {
		return false, nil
	}
	return true, c.err
}

func (c *poolerCache) set(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.err = time.Now(), err
}

// poolerErr recognises the errors a transaction pooler causes in pgx: a
// statement prepared by one client found (or missed) by another on the
// same server connection. It returns nil for any other error.
func poolerErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P05" || pgErr.Code == "26000") {
		return fmt.Errorf("%w (%s: another client's prepared statements are on this server connection)", ErrTransactionPooler, pgErr.Message)
	}
	return nil
}

// probe is what a new session showed about itself; verdict decides.
type probe struct {
	serverVersion string // the ParameterStatus the server (or pooler) sent
	lockPID       uint32 // backend of the statement taking the probe lock
	locked        bool   // whether it got the probe lock
	checkPID      uint32 // backend of the next statement
	seen          bool   // whether that statement found the lock on its backend (and gave it back)
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
// admin console reports e.g. "1.18.0/bouncer").
func checkServerVersion(v string) error {
	if strings.Contains(strings.ToLower(v), "bouncer") {
		return fmt.Errorf("%w (the server reports version %q: the url names PgBouncer's admin console)", ErrTransactionPooler, v)
	}
	return nil
}

// probeSession applies the session settings and checks that conn behaves
// as one session: a session lock taken by one statement must still be
// there, on the same backend, in the next. It returns the backend pid.
// Two round trips: the second statement gives the lock back, which
// answers true only on the session holding it, so finding the lock and
// freeing it are one (probeCheckSQL).
func (l *Locker) probeSession(ctx context.Context, conn *pgx.Conn) (uint32, error) {
	p := probe{serverVersion: conn.PgConn().ParameterStatus("server_version")}
	if err := checkServerVersion(p.serverVersion); err != nil {
		return 0, err // do not even query a pooler's admin console
	}
	simple := pgx.QueryExecModeSimpleProtocol
	if err := conn.QueryRow(ctx, l.times.probeSQL(), simple).Scan(&p.lockPID, &p.locked); err != nil {
		return 0, probeErr(err)
	}
	if err := conn.QueryRow(ctx, probeCheckSQL, simple).Scan(&p.checkPID, &p.seen); err != nil {
		return 0, probeErr(err)
	}
	if err := p.verdict(); err != nil {
		return 0, err
	}
	return p.lockPID, nil
}

func probeErr(err error) error {
	if pe := poolerErr(err); pe != nil {
		return pe
	}
	return fmt.Errorf("locking/pg: %w: probing a new session: %w", failure(err), err)
}

// ensureSchema creates bext_lock_fences once per Locker, if it is missing.
func (l *Locker) ensureSchema(ctx context.Context, s *session) error {
	return l.ensureSchemaConn(ctx, s.conn)
}

// ensureSchemaConn creates bext_lock_fences once per Locker, if it is
// missing or lacks a column.
func (l *Locker) ensureSchemaConn(ctx context.Context, conn *pgx.Conn) error {
	if l.schemaOK.Load() {
		return nil
	}
	l.schemaMu.Lock()
	defer l.schemaMu.Unlock()
	if l.schemaOK.Load() {
		return nil
	}
	// The table's schema and whether it has every column, in one round
	// trip when it is there, as it is but on a cluster's first start.
	var (
		schema   string
		complete bool
	)
	err := conn.QueryRow(ctx, tableStateSQL).Scan(&schema, &complete)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if err != nil || !complete {
		if _, err := conn.Exec(ctx, createTableSQL); err != nil {
			return err
		}
		if err := conn.QueryRow(ctx, tableSchemaSQL).Scan(&schema); err != nil {
			return err
		}
	}
	// Written before schemaOK: whoever sees schemaOK sees the channel.
	l.channel = tickChannel(schema, l.opts.Namespace)
	l.schemaOK.Store(true)
	return nil
}

func sessionErr(err error) error {
	if pe := poolerErr(err); pe != nil {
		return fmt.Errorf("locking/pg: %w", pe)
	}
	return fmt.Errorf("locking/pg: %w: %w", failure(err), err)
}

// failure is the sentinel a failed statement's error wraps: Postgres
// refusing it to the configured role (insufficient_privilege, 42501; at
// connection, class 28: the role may not log in, or not with this
// password) is locking.ErrPermission, anything else (no answer, a broken
// session, a timeout) locking.ErrUnavailable.
func failure(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42501" || strings.HasPrefix(pgErr.Code, "28")) {
		return locking.ErrPermission
	}
	return locking.ErrUnavailable
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
