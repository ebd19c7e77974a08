package pg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	store "github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/locking"
)

// Sentinel errors of this backend. Both are also matched by the locking
// sentinels they wrap (see each).
var (
	// ErrTransactionPooler: the sessions do not stay on one Postgres backend,
	// so advisory locks would not exclude anything. Not wrapped with
	// ErrUnavailable: it is a configuration mistake, not a passing outage.
	ErrTransactionPooler = errors.New("locking/pg: session advisory locks do not work behind a transaction-pooling PgBouncer: point [locking.pg] url at Postgres or a session-pooling pool")
)

// Defaults for Options fields left zero.
const (
	DefaultNamespace   = "bext"
	DefaultMaxSessions = 16
	DefaultOpTimeout   = 5 * time.Second
)

// Options configure a Locker. Zero fields take the defaults above.
type Options struct {
	// URL is a postgres:// URL or a keyword/value DSN, as pgx.ParseConfig
	// reads it (sslmode, connect_timeout, options=... and so on).
	URL string
	// Namespace separates clusters sharing one database: keys of different
	// namespaces never contend (beyond a 2^-64 id collision). Default "bext".
	Namespace string
	// MaxSessions bounds the connections this Locker opens. It does not
	// bound the locks held: a session holds any number of them, and calls
	// share the sessions, queueing on a busy one. Default 16.
	MaxSessions int
	// OpTimeout bounds every query and every new connection. Default 5s.
	OpTimeout time.Duration
	// Holder is recorded with each acquisition for `bext-scheduler locks`
	// (node id and pid). Default "<hostname>/<pid>".
	Holder string
}

// Locker is the Postgres lock backend. It implements locking.Locker,
// locking.TickLocker, locking.TickWatcher, locking.Pauser,
// locking.LeaseBounder and locking.Pinger, and lists held locks with List;
// TryLockTicks and ReleaseAll batch (locking.TickBatcher and
// locking.ReleaseBatcher).
// Safe for concurrent use.
type Locker struct {
	opts  Options
	cfg   *pgx.ConnConfig
	times sessionTimes
	// lockTimeout bounds a tick batch's wait on a row (ticks.go);
	// lockTimeoutSetting is it as lock_timeout's value.
	lockTimeout        time.Duration
	lockTimeoutSetting string

	mu        sync.Mutex
	closed    bool
	sessions  []*session       // open sessions, shared by calls and locks (pool.go)
	open      int              // sessions open or being connected
	connected chan struct{}    // closed (and replaced) when a connect ends
	held      map[int64]*lease // lock id → its lease; nil while a TryLock is asking
	leaseSeq  uint64           // the seq of the last lease held (hold)
	// abandoned are the sessions given up while holding locks, each
	// closed by its timer once no holder counts on them (abandon).
	abandoned map[*gateConn]*time.Timer
	ops       sync.WaitGroup // TryLock, Ping and List calls in flight, for Close

	// abort is cancelled when Close's deadline passes: every query in
	// flight gives up at once, so Close returns in time.
	abort     context.Context
	abortFunc context.CancelFunc

	schemaMu  sync.Mutex
	schemaOK  atomic.Bool
	channel   string      // where raised marks are told (watch.go); set before schemaOK
	clusterOK atomic.Bool // the cluster tables exist (cluster.go)
	warmed    atomic.Bool // InitMarks readied the sessions of a burst (warm)

	pooler poolerCache // the last pooler test's verdict (session.go)
}

// lease is a held lock: the handle's private state. mu serialises Renew,
// Release and Close of this lock; done means the lock was released or
// lost. sess is the session that took the lock, shared with other locks:
// renew and release go there.
type lease struct {
	mu   sync.Mutex
	id   int64
	key  string // the lock's key (a per-tick lock's is the tick's)
	sess *session
	done bool
	seq  uint64 // order of taking, for ReleaseAll's locking of many mu (set by hold)

	fenceVal int64 // the fencing token of this acquisition

	// Set for a try-lock-tick lease: the mark's row, the grant's token and
	// T, so a resent call can be recognised and Release can forget the
	// grant. grantOpen says the row may still record the grant: Release
	// forgets it, on another session when its own died (forgetGrants).
	tick      bool
	grantOpen bool
	rowKey    string
	token     string
	tickUS    int64
	// before is the grant's TickAnswer.Before (µs; nil: none), answered
	// again to a resend this Locker answers from the lease.
	before *int64

	// req is set for a TakeRequest's lease (token is then the take's): a
	// resend of that take is answered from it. heard says its taker's word
	// that it heard the take (a renewal) has moved the take's bext_taken
	// row to bext_taken_heard (Renew), so that its trigger never goes back
	// to its queue by itself (takeRequestSQL).
	req   *store.Request
	heard bool
	// closing: released by Close (releaseTakeSQL is not used).
	closing bool
}

var (
	_ locking.Locker       = (*Locker)(nil)
	_ locking.Pinger       = (*Locker)(nil)
	_ locking.TickLocker   = (*Locker)(nil)
	_ locking.Pauser       = (*Locker)(nil)
	_ locking.LeaseBounder = (*Locker)(nil)
	// The batching contract (locking/batch.go).
	_ locking.TickBatcher    = (*Locker)(nil)
	_ locking.ReleaseBatcher = (*Locker)(nil)
)

// Open checks opts and parses the URL, without connecting: a node must start
// while Postgres is down and recover by itself when it returns. A bad URL
// gives an error wrapping locking.ErrInvalid, with any password redacted.
func Open(ctx context.Context, opts Options) (*Locker, error) {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.MaxSessions == 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.OpTimeout == 0 {
		opts.OpTimeout = DefaultOpTimeout
	}
	if opts.Holder == "" {
		host, _ := os.Hostname()
		opts.Holder = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	var problems []error
	if opts.MaxSessions < 0 {
		problems = append(problems, fmt.Errorf("locking/pg: %w: max sessions %d is negative", locking.ErrInvalid, opts.MaxSessions))
	}
	if opts.OpTimeout < 0 {
		problems = append(problems, fmt.Errorf("locking/pg: %w: op timeout %v is negative", locking.ErrInvalid, opts.OpTimeout))
	}
	if opts.URL == "" {
		problems = append(problems, &locking.InvalidError{Field: "url", Subject: "pg", Reason: "empty url"})
	}
	var cfg *pgx.ConnConfig
	if opts.URL != "" {
		var err error
		if cfg, err = pgx.ParseConfig(opts.URL); err != nil {
			// Not wrapped: pgx's error keeps the raw string, password included.
			problems = append(problems, &locking.InvalidError{Field: "url", Subject: "pg: [locking.pg] url",
				Reason: scrubSecrets(err.Error(), opts.URL)})
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	l := &Locker{opts: opts, cfg: cfg, held: make(map[int64]*lease), connected: make(chan struct{}), abandoned: make(map[*gateConn]*time.Timer)}
	l.times = configureSessions(cfg, opts.OpTimeout)
	l.lockTimeout = lockTimeout(opts.OpTimeout)
	l.lockTimeoutSetting = strconv.FormatInt(l.lockTimeout.Milliseconds(), 10)
	l.abort, l.abortFunc = context.WithCancel(context.Background())
	context.AfterFunc(l.abort, l.abortSessions)
	return l, nil
}

// opCtx bounds one step by OpTimeout, and by Close's deadline.
func (l *Locker) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.OpTimeout)
	stop := context.AfterFunc(l.abort, cancel)
	return ctx, func() { stop(); cancel() }
}

// claimID reserves lock id for a TryLock or TryLockTick of this Locker. It
// returns false when this Locker holds the id (or is asking for it): the
// caller answers contended, since asking Postgres from the holding session
// would wrongly succeed (re-entrancy). mine is then the holding lease (nil
// while another call is still asking). A holding session found dead is
// forgotten and the id reserved. On true, the caller must settle the id.
func (l *Locker) claimID(ctx context.Context, id int64, resend func(*lease) bool) (ok bool, mine *lease, err error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return false, nil, locking.ErrClosed
		}
		ls, found := l.held[id]
		if !found {
			l.held[id] = nil // claim the id: racing calls of ours see it
			l.ops.Add(1)
			l.mu.Unlock()
			return true, nil, nil
		}
		l.mu.Unlock()
		if ls == nil {
			return false, nil, nil
		}
		if resend != nil && resend(ls) {
			return false, ls, nil
		}
		// Unless the holding session has died unnoticed (its handle
		// abandoned): then forget it and ask Postgres.
		if l.stillHeld(ctx, ls) {
			return false, ls, nil
		}
	}
}

// settle records the outcome of a claimed id's ask: ls nil (not taken)
// frees the id. It returns ls, or nil with ErrClosed when Close ran
// meanwhile (the lock is then ended by closing its session).
func (l *Locker) settle(ctx context.Context, id int64, ls *lease) (*lease, error) {
	defer l.ops.Done()
	l.mu.Lock()
	if ls == nil {
		delete(l.held, id)
		l.mu.Unlock()
		return nil, nil
	}
	if l.closed {
		// Close ran while we asked and could not see this lock: Close ends
		// it by closing its session, after this call (it waits for ops).
		delete(l.held, id)
		l.mu.Unlock()
		return nil, locking.ErrClosed
	}
	l.held[id] = ls
	l.mu.Unlock()
	return ls, nil
}

// TryLock takes key if it is free. ttl is only the caller's lease: advisory
// locks last until Release or until their session dies. A key this Locker
// already holds answers contended without asking Postgres.
func (l *Locker) TryLock(ctx context.Context, key string, ttl time.Duration) (*locking.Handle, error) {
	if err := locking.CheckTryLock(key, ttl); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("locking/pg: try-lock %q: %w", key, err)
	}
	tok, err := locking.NewToken()
	if err != nil {
		return nil, err
	}
	id := lockID(l.opts.Namespace, key)
	ok, _, err := l.claimID(ctx, id, nil)
	if !ok {
		return nil, err
	}
	ls, err := l.tryLock(ctx, id, key)
	ls, serr := l.settle(ctx, id, ls)
	if ls == nil {
		return nil, cmp.Or(serr, err)
	}
	return locking.NewHandle(l, key, tok, ls.fenceVal, ttl, ls), nil
}

// tryLock asks Postgres once, on a shared session, retrying once on a
// fresh connection when a reused session turns out dead (Postgres
// restarted since). Retrying is safe: any lock the dead session might have
// taken stays with that session until it ends (abandon), so the retry
// finds it contended, never held twice. The id is claimed (claimID), so no
// session of this Locker holds it and asking on any of them is sound.
func (l *Locker) tryLock(ctx context.Context, id int64, key string) (*lease, error) {
	ctx, cancel := l.stmtCtx(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		s, fresh, err := l.acquireReady(ctx)
		if err != nil {
			return nil, fmt.Errorf("locking/pg: try-lock %q: %w", key, err)
		}
		var (
			ok    bool
			fence *int64
			pid   uint32
		)
		err = s.conn.QueryRow(ctx, tryLockSQL, id, l.opts.Namespace, key, l.opts.Holder).Scan(&ok, &fence, &pid)
		if err != nil {
			// The statement may have taken the lock before failing.
			if l.failed(ctx, s, id, err) && !fresh && attempt == 0 && isConnError(err) && ctx.Err() == nil {
				continue
			}
			return nil, queryErr("try-lock", key, err)
		}
		if pid != s.pid {
			err := fmt.Errorf("%w: try-lock %q ran on backend %d, the session's is %d", ErrTransactionPooler, key, pid, s.pid)
			l.killOwned(s, err)
			l.release(s)
			return nil, err
		}
		if !ok {
			l.release(s)
			return nil, nil
		}
		if fence == nil {
			l.giveBack(ctx, s, id)
			return nil, fmt.Errorf("locking/pg: %w: try-lock %q: won the lock but got no fencing token", locking.ErrUnavailable, key)
		}
		ls := &lease{id: id, key: key, sess: s, fenceVal: *fence}
		l.hold(ls)
		l.release(s)
		return ls, nil
	}
}

// acquireReady is acquire plus the table, for statements that use it.
func (l *Locker) acquireReady(ctx context.Context) (*session, bool, error) {
	s, fresh, err := l.acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	if err := l.ensureSchema(ctx, s); err != nil {
		if broken(s, err) {
			l.killOwned(s, err)
		}
		l.release(s)
		if pe := poolerErr(err); pe != nil {
			return nil, false, pe
		}
		return nil, false, fmt.Errorf("locking/pg: %w: creating bext_lock_fences: %w", failure(err), err)
	}
	return s, fresh, nil
}

// queryErr wraps the failure of a lock statement: ErrTransactionPooler
// when it shows a pooler, else ErrUnavailable (Postgres could not answer).
func queryErr(op, key string, err error) error {
	if pe := poolerErr(err); pe != nil {
		return fmt.Errorf("locking/pg: %s %q: %w", op, key, pe)
	}
	return fmt.Errorf("locking/pg: %w: %s %q: %w", failure(err), op, key, err)
}

// lostErr wraps the failure of a statement on a held lock's session: the
// lock is lost (its session is given up: abandon), and when Postgres did not answer
// (a broken connection, a timeout) the backend is also unavailable, so an
// outage reads as one and not only as lost locks.
func lostErr(op, key string, err error) error {
	if pe := poolerErr(err); pe != nil {
		return fmt.Errorf("locking/pg: %w: %s %q: %w", locking.ErrLockLost, op, key, pe)
	}
	if isConnError(err) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w: pg: %s %q: %w", locking.ErrLockLost, locking.ErrUnavailable, op, key, err)
	}
	return fmt.Errorf("locking/pg: %w: %s %q: %w", locking.ErrLockLost, op, key, err)
}

// Renew proves the handle's session is alive and still holds its lock. It
// does not extend anything (advisory locks have no TTL). Renewals of the
// locks of one session that come at once share one statement (renewOn),
// which goes before any other statement waiting for the session. A
// failure ends the lock: the error wraps locking.ErrLockLost, and also
// locking.ErrUnavailable when Postgres did not answer; a session that
// failed to answer is given up, and every other lock on it is lost with
// it (each told at its holder's next call; the server keeps them until
// their leases ended: abandon).
// Renew returns by ctx's deadline: when the session has not answered by
// then, the error wraps locking.ErrUnavailable alone (the statement goes
// on, bounded by OpTimeout, and its failure would still end the session).
func (l *Locker) Renew(ctx context.Context, h *locking.Handle) error {
	ls, err := l.leaseOf(h)
	if err != nil {
		return err
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.done {
		return l.doneErr(ls)
	}
	if err := ctx.Err(); err != nil {
		// Not asked: the session is not in doubt and keeps the lock, but the
		// caller must act as if it were lost.
		return fmt.Errorf("locking/pg: renew %q: %w", ls.key, err)
	}
	if err := l.check(ctx, ls); err != nil {
		return err
	}
	if ls.req != nil && !ls.req.Backfill && ls.token != "" && !ls.heard {
		return l.hearTake(ctx, ls) // a backfill's take keeps no row: it stays queued until Done
	}
	return nil
}

// hearTake moves the bext_taken row of ls's take to bext_taken_heard on
// its first renewal: its taker heard the take, and its trigger must never
// go back to its queue by itself. The lock was held at the check just before; a row already gone
// was requeued by a take that found the lock free (its session died
// since) or given back by a resend: the lock is lost, and the trigger is
// not ours to run. ls.mu must be held.
func (l *Locker) hearTake(ctx context.Context, ls *lease) error {
	var n int64
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, hearTakeSQL, l.opts.Namespace, ls.key, ls.token).Scan(&n)
	})
	switch {
	case err != nil:
		return fmt.Errorf("locking/pg: %w: renew %q: the take's record: %w", failure(err), ls.key, err)
	case n == 0:
		return fmt.Errorf("locking/pg: %w: renew %q: the take's trigger went back to its queue", locking.ErrLockLost, ls.key)
	}
	ls.heard = true
	return nil
}

// check asks whether ls's session still holds its lock; on any failure it
// ends ls and returns an error wrapping ErrLockLost. ls.mu must be held
// and ls not done.
func (l *Locker) check(ctx context.Context, ls *lease) error {
	if err := l.deadErr("renew", ls); err != nil {
		return err
	}
	s := ls.sess
	r := l.renewOn(s)
	select {
	case <-r.done:
	case <-ctx.Done():
		// The round goes on without this caller and ends s if it fails;
		// the lock may still be held, but the caller must act as if lost.
		return fmt.Errorf("locking/pg: %w: renew %q: session %d did not answer by the caller's deadline: %w",
			locking.ErrUnavailable, ls.key, s.pid, context.Cause(ctx))
	}
	if r.err != nil {
		if err := l.deadErr("renew", ls); err != nil {
			return err
		}
		if r.unsent {
			// Never sent (no slot within OpTimeout, or Close): the
			// session is not in doubt, and keeps its locks.
			if errors.Is(r.err, locking.ErrClosed) {
				return locking.ErrClosed
			}
			return fmt.Errorf("locking/pg: renew %q: %w", ls.key, r.err)
		}
		// No answer in time: the session is in doubt.
		l.kill(s, r.err)
		ls.done = true
		return lostErr("renew", ls.key, r.err)
	}
	if r.pid != s.pid {
		err := fmt.Errorf("%w: backend %d, the session's is %d", ErrTransactionPooler, r.pid, s.pid)
		l.kill(s, err)
		ls.done = true
		return fmt.Errorf("locking/pg: %w: renew %q: %w", locking.ErrLockLost, ls.key, err)
	}
	if _, ok := r.held[ls.id]; r.held != nil && !ok {
		l.forget(ls)
		return fmt.Errorf("locking/pg: %w: renew %q: the session no longer holds the advisory lock", locking.ErrLockLost, ls.key)
	}
	return nil
}

// stillHeld answers a TryLock for a key this Locker holds: true (contended)
// unless the holding session is found dead or without the lock, in which
// case the lease is ended. A lease busy in another call, or whose session
// did not answer in time (check ends it only when in doubt), counts as
// held.
func (l *Locker) stillHeld(ctx context.Context, ls *lease) bool {
	if !ls.mu.TryLock() {
		return true
	}
	defer ls.mu.Unlock()
	if ls.done {
		return false
	}
	return l.check(ctx, ls) == nil || !ls.done
}

// Release unlocks on the lock's session, in one round trip; the session
// stays open for its other locks. A lock that is no longer held, or any
// failure, gives an error wrapping locking.ErrLockLost (and
// locking.ErrUnavailable when Postgres did not answer); a session that
// failed to answer is given up (abandon), which ends its locks once no
// holder can count on them.
func (l *Locker) Release(ctx context.Context, h *locking.Handle) error {
	ls, err := l.leaseOf(h)
	if err != nil {
		return err
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if err := ctx.Err(); err != nil {
		// Not asked: the lock stays held and the session usable.
		if ls.done {
			return l.doneErr(ls)
		}
		return fmt.Errorf("locking/pg: release %q: %w", ls.key, err)
	}
	if ls.done {
		// Lost before (its session died, a renewal failed): the grant is
		// given up all the same.
		l.forgetGrants(ctx, []*lease{ls})
		return l.doneErr(ls)
	}
	return l.unlock(ctx, ls)
}

// unlock gives ls's lock back and forgets a tick grant (forgetGrants when
// its session could not); ls.mu must be held and ls not done.
func (l *Locker) unlock(ctx context.Context, ls *lease) error {
	var errs [1]error
	l.unlockOn(ctx, ls.sess, []*lease{ls}, errs[:])
	l.forgetGrants(ctx, []*lease{ls})
	return errs[0]
}

// forgetGrants forgets, on any session, the grants of the tick leases
// among leases whose rows may still record them (grantOpen): their own
// session died, or did not hold the lock, before releaseTickSQL could.
// A grant left recorded would answer a resend of its request by taking
// the lock again, running a tick its holder gave up or ran. Best effort:
// the release's answer is the lock's, and a grant not forgotten here ends
// with its until (tryLockTicksSQL). Each lease's mu must be held.
func (l *Locker) forgetGrants(ctx context.Context, leases []*lease) {
	var open []*lease
	for _, ls := range leases {
		if ls.tick && ls.grantOpen {
			open = append(open, ls)
		}
	}
	if len(open) == 0 {
		return
	}
	// One row at a time, each its own transaction, in key order: never a
	// second row lock held while waiting for a batch's.
	slices.SortFunc(open, func(a, b *lease) int { return cmp.Compare(a.rowKey, b.rowKey) })
	_ = l.withTable(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		for _, ls := range open {
			if _, err := conn.Exec(ctx, forgetTickSQL, l.opts.Namespace, ls.rowKey, ls.token, ls.tickUS); err != nil {
				return err
			}
			ls.grantOpen = false
		}
		return nil
	})
}

// leaseOf checks h and the Locker's state and returns h's lease.
func (l *Locker) leaseOf(h *locking.Handle) (*lease, error) {
	st, err := locking.HandleState(h, l)
	if err != nil {
		return nil, err
	}
	ls, ok := st.(*lease)
	if !ok {
		return nil, fmt.Errorf("locking/pg: %w: %v carries no pg lease", locking.ErrInvalid, h)
	}
	if l.isClosed() {
		return nil, locking.ErrClosed
	}
	return ls, nil
}

func (l *Locker) doneErr(ls *lease) error {
	if l.isClosed() {
		return locking.ErrClosed
	}
	return fmt.Errorf("locking/pg: %w: %q was already released or lost", locking.ErrLockLost, ls.key)
}

func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close releases every lock this Locker holds and closes all its sessions.
// It ignores ctx's cancellation (shutdown often passes a cancelled context)
// but honours its deadline: when the deadline passes, every query still in
// flight is abandoned and the remaining sessions are closed at once, which
// ends their locks as soon as the server notices. Without a deadline each
// step is bounded by OpTimeout, and the locks are released in parallel.
// It waits for TryLock, Ping and List calls in flight. Later calls return
// locking.ErrClosed, except Close, which is safe to call twice.
func (l *Locker) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	leases := make([]*lease, 0, len(l.held))
	for _, ls := range l.held {
		if ls != nil {
			leases = append(leases, ls)
		}
	}
	l.mu.Unlock()
	defer l.abortFunc()
	if dl, ok := ctx.Deadline(); ok {
		t := time.AfterFunc(time.Until(dl), l.abortFunc)
		defer t.Stop()
	}

	ctx = context.WithoutCancel(ctx)
	var (
		wg   sync.WaitGroup
		emu  sync.Mutex
		errs []error
	)
	for _, ls := range leases {
		wg.Go(func() {
			ls.mu.Lock()
			defer ls.mu.Unlock()
			if ls.done {
				return
			}
			// Close's release is no word from a take's taker that it heard
			// the take (releaseTakeSQL): the take's row stays, and its
			// trigger goes back to its queue unless it was heard.
			ls.closing = true
			if err := l.unlock(ctx, ls); err != nil && !errors.Is(err, locking.ErrLockLost) {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		})
	}
	wg.Wait()
	l.ops.Wait()
	l.mu.Lock()
	sessions := append([]*session(nil), l.sessions...)
	l.mu.Unlock()
	for _, s := range sessions {
		wg.Go(func() {
			// A Renew may still be using it: wait for its statement
			// (bounded by OpTimeout and by ctx's deadline, via abort).
			s.sem <- struct{}{}
			// Its last statement's deadline (stmtCtx) may have passed:
			// Terminate gets closeConn's own bound.
			if nc := s.conn.PgConn().Conn(); nc != nil && l.abort.Err() == nil {
				_ = nc.SetDeadline(time.Time{})
			}
			closeConn(l, ctx, s.conn)
			l.killOwned(s, locking.ErrClosed)
			l.mu.Lock()
			s.handOffLocked() // a waiter, told the session is dead, gives up
			l.mu.Unlock()
		})
	}
	wg.Wait()
	// The abandoned sessions' holders are done with this Locker too.
	l.mu.Lock()
	for g, t := range l.abandoned {
		t.Stop()
		_ = g.shutNow()
		delete(l.abandoned, g)
	}
	l.mu.Unlock()
	return errors.Join(errs...)
}

// Ping runs a short query on an idle session, or on a fresh connection when
// none is idle. Errors wrap locking.ErrUnavailable.
func (l *Locker) Ping(ctx context.Context) error {
	return l.withSession(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SELECT 1")
		return err
	})
}

// List returns the locks held now in this Locker's namespace, by any node:
// the granted advisory locks joined with their fence rows. TTLLeft is 0
// (advisory locks have none). Errors wrap locking.ErrUnavailable.
func (l *Locker) List(ctx context.Context) ([]locking.LockInfo, error) {
	var out []locking.LockInfo
	err := l.withSession(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		out = out[:0]
		if !l.schemaOK.Load() {
			var exists bool
			if err := conn.QueryRow(ctx, tableExistsSQL).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return nil // nothing was ever locked here
			}
		}
		rows, err := conn.Query(ctx, listSQL, l.opts.Namespace)
		if err != nil {
			return err
		}
		var li locking.LockInfo
		_, err = pgx.ForEachRow(rows, []any{&li.Key, &li.Fence, &li.Holder}, func() error {
			out = append(out, li)
			return nil
		})
		return err
	})
	return out, err
}
