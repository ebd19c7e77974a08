package pg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/locking"
)

// session is one open connection, with the backend pid it was probed on,
// shared by every lock it holds and by every call that needs a statement.
//
// Many advisory locks live on one session: a lock stays on the session
// that took it (renew and release go there), and sessions are taken for
// a statement, never pinned by a lock, so MaxSessions bounds connections,
// not locks held. A pgx.Conn is not safe for concurrent use: sem lets one
// statement at a time on it, the others queue; renewals go first (urgent),
// so the proof that a session still holds its locks never waits behind
// other schedules' statements, only behind the one in flight (a tick
// batch waiting on a row gives the slot up every lockTimeout: ticks.go).
type session struct {
	conn *pgx.Conn
	gate *gateConn // conn's socket: only the Locker ends the session (abandon)
	pid  uint32
	sem  chan struct{} // holds a token while a statement uses conn

	// Under Locker.mu.
	busy   int              // calls holding or waiting for sem
	urgent []chan struct{}  // renewals waiting for sem, in order: served first (handOffLocked)
	leases map[int64]*lease // the locks this session holds
	dead   bool             // killed: its locks are gone, never re-taken
	cause  error            // why it was killed

	rmu     sync.Mutex
	round   *renewRound  // the next renew round not yet sent, nil if none
	rounds  atomic.Int64 // renew statements sent, for tests
	audited time.Time    // when a renew round last read pg_locks (under rmu)
	audits  atomic.Int64 // renew rounds that read pg_locks, for tests
}

func newSession(conn *pgx.Conn, pid uint32) *session {
	s := &session{conn: conn, pid: pid, sem: make(chan struct{}, 1), leases: make(map[int64]*lease), gate: gateOf(conn)}
	if s.gate != nil {
		s.gate.guard(conn.PgConn())
	}
	return s
}

// errSessionDead is the cause given to a call that waited for a session
// killed meanwhile.
var errSessionDead = errors.New("locking/pg: the session was closed")

// acquire returns a session whose statement slot (sem) the caller now
// holds: an existing session nobody uses, else a new one while fewer than
// MaxSessions are open, else the least busy one, waited for. fresh says the
// session was connected for this call (a statement failing on a reused
// one may be retried once: it may have died unnoticed). ctx bounds the
// wait and the connecting; the caller must release (or kill) s.
func (l *Locker) acquire(ctx context.Context) (s *session, fresh bool, err error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, false, locking.ErrClosed
		}
		var best *session
		for _, c := range l.sessions {
			if best == nil || c.busy < best.busy || (c.busy == best.busy && len(c.leases) < len(best.leases)) {
				best = c
			}
		}
		if best == nil || (best.busy > 0 && l.open < l.opts.MaxSessions) {
			if l.open >= l.opts.MaxSessions {
				// Every session is being connected by another call: wait
				// for one to be done.
				ch := l.connected
				l.mu.Unlock()
				wctx, cancel := l.waitCtx(ctx)
				select {
				case <-ch:
					cancel()
					continue
				case <-wctx.Done():
					cancel()
					return nil, false, fmt.Errorf("locking/pg: %w: waiting for a session: %w", locking.ErrUnavailable, wctx.Err())
				}
			}
			l.open++
			l.mu.Unlock()
			wctx, cancel := l.waitCtx(ctx)
			s, err := l.connect(wctx)
			cancel()
			l.mu.Lock()
			close(l.connected)
			l.connected = make(chan struct{})
			if err != nil {
				l.open--
				l.mu.Unlock()
				return nil, false, err
			}
			s.busy = 1
			s.sem <- struct{}{}
			if l.closed {
				l.open--
				l.mu.Unlock()
				closeConn(l, ctx, s.conn)
				return nil, false, locking.ErrClosed
			}
			l.sessions = append(l.sessions, s)
			l.mu.Unlock()
			l.bound(ctx, s)
			return s, true, nil
		}
		best.busy++
		l.mu.Unlock()
		if err := l.enter(ctx, best, false); err != nil {
			if errors.Is(err, errSessionDead) {
				continue // try another
			}
			return nil, false, err
		}
		return best, false, nil
	}
}

// enter waits for s's statement slot; s.busy was raised by the caller and
// is lowered again on failure. An urgent caller (a renewal) is served
// before every other waiter. It fails when ctx (or the caller's context
// it carries: waitCtx) ends first, or when s was killed (errSessionDead).
func (l *Locker) enter(ctx context.Context, s *session, urgent bool) error {
	select {
	case s.sem <- struct{}{}:
	default:
		// Busy: wait, under a timer only now.
		wait := l.waitSlot
		if urgent {
			wait = l.waitUrgent
		}
		if err := wait(ctx, s); err != nil {
			return fmt.Errorf("locking/pg: %w: waiting for session %d: %w", locking.ErrUnavailable, s.pid, err)
		}
	}
	l.mu.Lock()
	dead := s.dead
	l.mu.Unlock()
	if dead {
		l.release(s)
		return errSessionDead
	}
	l.bound(ctx, s)
	return nil
}

// waitSlot waits in line for s's slot.
func (l *Locker) waitSlot(ctx context.Context, s *session) error {
	wctx, cancel := l.waitCtx(ctx)
	defer cancel()
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-wctx.Done():
		l.mu.Lock()
		s.busy--
		l.mu.Unlock()
		return wctx.Err()
	}
}

// waitUrgent waits for s's slot ahead of every waitSlot: its holder hands
// it over (handOffLocked) instead of freeing it.
func (l *Locker) waitUrgent(ctx context.Context, s *session) error {
	turn := make(chan struct{})
	l.mu.Lock()
	select {
	case s.sem <- struct{}{}: // freed meanwhile
		l.mu.Unlock()
		return nil
	default:
	}
	s.urgent = append(s.urgent, turn)
	l.mu.Unlock()
	wctx, cancel := l.waitCtx(ctx)
	defer cancel()
	select {
	case <-turn:
		return nil
	case s.sem <- struct{}{}:
		// Freed by a holder that did not hand it over (a test's): taken
		// in line with the others.
		l.mu.Lock()
		if i := slices.Index(s.urgent, turn); i >= 0 {
			s.urgent = slices.Delete(s.urgent, i, i+1)
		}
		l.mu.Unlock()
		return nil
	case <-wctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.Index(s.urgent, turn); i >= 0 {
		s.urgent = slices.Delete(s.urgent, i, i+1)
	} else {
		// Handed the slot as the wait ended: pass it on.
		s.handOffLocked()
	}
	s.busy--
	return wctx.Err()
}

// use enters s for a statement on one of its locks.
func (l *Locker) use(ctx context.Context, s *session) error { return l.useAs(ctx, s, false) }

// useAs is use; urgent (a renewal) goes before every other waiter.
func (l *Locker) useAs(ctx context.Context, s *session, urgent bool) error {
	l.mu.Lock()
	if s.dead {
		l.mu.Unlock()
		return errSessionDead
	}
	s.busy++
	l.mu.Unlock()
	return l.enter(ctx, s, urgent)
}

// release gives s's statement slot back.
func (l *Locker) release(s *session) {
	l.mu.Lock()
	s.handOffLocked()
	s.busy--
	l.mu.Unlock()
}

// handOffLocked gives up s's slot, held by the caller, to the first urgent
// waiter if there is one, else frees it for the others; Locker.mu is held
// (an urgent waiter registers under it only while the slot is taken).
func (s *session) handOffLocked() {
	if len(s.urgent) > 0 {
		close(s.urgent[0])
		s.urgent = slices.Delete(s.urgent, 0, 1)
		return
	}
	<-s.sem
}

// kill ends s for good: it is forgotten, and each of its locks is lost,
// to be reported as such to its holder at its next Renew or Release, at
// once (the held map forgets them at once, so their keys can be asked for
// again; nothing re-takes them by itself). The session is abandoned, not
// ended (abandon): no statement goes out on it any more, one in flight
// fails at once, but its socket, and so its locks on the server, last
// until no holder can still count on them. Safe to call without s's slot
// and more than once.
func (l *Locker) kill(s *session, cause error) {
	if l.bury(s, cause) {
		l.abandon(s)
	}
}

// killOwned is kill by the holder of s's slot.
func (l *Locker) killOwned(s *session, cause error) { l.kill(s, cause) }

// abandon gives up s, just buried. Closing its socket would make Postgres
// end the session and free every lock on it at once, while each holder
// multiplexed on it counts on its lock until its last successful call plus
// MaxLease (locking.LeaseBounder), and is told otherwise only at its next
// Renew or Release: another node could be granted a key whose holder still
// runs. So the socket stays open for MaxLease from now, past every such
// lease (each began before now), and only then is closed. Every holder's
// next call is answered lost at once (s is dead), so none renews across
// the gap, and the socket carries nothing meanwhile (gateConn), so the
// session cannot take or free anything. A session with no locks is closed
// at once; Close closes the abandoned ones too.
//
// The server may end the session sooner by itself, but only as it would
// have anyway: its keepalives (MaxLease after the last traffic) or an
// operator, which MaxLease already accounts for.
func (l *Locker) abandon(s *session) {
	g := s.gate
	if g == nil {
		// A connection this package did not dial (tests): end it.
		if nc := s.conn.PgConn().Conn(); nc != nil {
			_ = nc.Close()
		}
		return
	}
	g.abandon()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(s.leases) == 0 || l.closed {
		_ = g.shutNow()
		return
	}
	l.abandoned[g] = time.AfterFunc(l.times.maxLease(), func() {
		_ = g.shutNow()
		l.mu.Lock()
		delete(l.abandoned, g)
		l.mu.Unlock()
	})
}

// bury marks s dead and forgets it and its locks; false if it already was.
func (l *Locker) bury(s *session, cause error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.dead {
		return false
	}
	s.dead, s.cause = true, cause
	for i, c := range l.sessions {
		if c == s {
			l.sessions = append(l.sessions[:i], l.sessions[i+1:]...)
			l.open--
			break
		}
	}
	for id, ls := range s.leases {
		if l.held[id] == ls {
			delete(l.held, id)
		}
	}
	return true
}

// broken tells whether err (from a statement on s) leaves s in doubt: the
// connection is closed (pgx closes it on a timeout mid-statement) or the
// server ended the session.
func broken(s *session, err error) bool {
	return s.conn.IsClosed() || isConnError(err)
}

// failed handles the failure of a statement that may have taken lock id
// on s, s's slot held: a session in doubt is killed (its end frees the
// lock); on a live session (an error the server answered) the lock is
// given back (giveBack). It releases s's slot and reports whether s was
// killed.
func (l *Locker) failed(ctx context.Context, s *session, id int64, err error) (killed bool) {
	if broken(s, err) {
		l.killOwned(s, err)
		l.release(s)
		return true
	}
	return l.giveBack(ctx, s, id)
}

// giveBack unlocks id on s, s's slot held, as a statement that took it
// but did not get to keep it failed (advisory session locks survive a
// rolled-back statement). The id is claimed, so s holds it at most once.
// If the unlock fails too, s is killed. It releases s's slot.
func (l *Locker) giveBack(ctx context.Context, s *session, id int64) (killed bool) {
	var ok bool
	if err := s.conn.QueryRow(ctx, releaseSQL, id).Scan(&ok); err != nil {
		l.killOwned(s, err)
		l.release(s)
		return true
	}
	l.release(s)
	return false
}

// hold records ls as held on its session; s's slot must be held, so a
// kill cannot run between the statement and the record.
func (l *Locker) hold(ls *lease) {
	l.mu.Lock()
	l.leaseSeq++
	ls.seq = l.leaseSeq
	ls.sess.leases[ls.id] = ls
	l.mu.Unlock()
}

// forget ends ls on its (live) session: the session no longer holds it.
func (l *Locker) forget(ls *lease) {
	ls.done = true
	l.mu.Lock()
	if ls.sess.leases[ls.id] == ls {
		delete(ls.sess.leases, ls.id)
	}
	if l.held[ls.id] == ls {
		delete(l.held, ls.id)
	}
	l.mu.Unlock()
}

// deadErr returns the error for a lease whose session was killed (nil if
// it was not): the lock is lost, and the backend unavailable when the
// session died of a broken connection.
func (l *Locker) deadErr(op string, ls *lease) error {
	var errs [1]error
	l.deadErrs(op, ls.sess, []*lease{ls}, errs[:])
	return errs[0]
}

// deadErrs is deadErr for leases, all on session s, read at one instant:
// if s was killed it ends each lease, sets errs[j] for leases[j] and
// returns true; else it leaves errs alone and returns false.
func (l *Locker) deadErrs(op string, s *session, leases []*lease, errs []error) bool {
	l.mu.Lock()
	dead, cause := s.dead, s.cause
	l.mu.Unlock()
	if !dead {
		return false
	}
	for j, ls := range leases {
		ls.done = true
		if errors.Is(cause, locking.ErrClosed) {
			errs[j] = locking.ErrClosed
			continue
		}
		errs[j] = lostErr(op, ls.key, fmt.Errorf("session %d ended: %w", s.pid, cause))
	}
	return true
}

// withSession runs fn on a shared session under OpTimeout (see stmtCtx).
// Errors wrap locking.ErrUnavailable, or ErrTransactionPooler.
func (l *Locker) withSession(ctx context.Context, fn func(context.Context, *pgx.Conn) error) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return locking.ErrClosed
	}
	l.ops.Add(1)
	l.mu.Unlock()
	defer l.ops.Done()

	ctx, cancel := l.stmtCtx(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		s, fresh, err := l.acquire(ctx)
		if err != nil {
			return err
		}
		if err := fn(ctx, s.conn); err != nil {
			if !broken(s, err) {
				l.release(s)
				return sessionErr(err)
			}
			l.killOwned(s, err)
			l.release(s)
			if !fresh && attempt == 0 && ctx.Err() == nil {
				continue
			}
			return sessionErr(err)
		}
		l.release(s)
		return nil
	}
}

// stmtCtx bounds a statement on a shared session by OpTimeout and Close's
// deadline, but not by ctx's cancellation or deadline: pgx breaks the
// connection of a statement whose context ends mid-flight, and a shared
// session carries other callers' locks. Callers check ctx before they
// start; from there the wait for a session and the statement are bounded
// by OpTimeout alone.
//
// The bound costs no timer on the way of a call that finds its session
// free: the context has no Done channel, so pgx arms nothing per query
// (it would otherwise register and remove a context.AfterFunc around every
// query, and the per-call timer and Close hook were a tenth of a
// TryLock+Release's client CPU). The deadline is applied to the
// connection itself when the call takes the session's slot (bound), and
// Close's deadline moves every session's to now (Open); a wait for a slot
// or a connection, the slow path, runs under a real timer (waitCtx). Err
// still reports the end (past the deadline, or Close's), as a cancelled
// context would, so callers' checks and pgx's timeout errors read as
// before.
//
// The waits honour the caller's own end as well (its deadline, its
// cancellation): before the statement is sent, giving up leaves nothing
// in doubt.
func (l *Locker) stmtCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return stmtContext{caller: ctx, deadline: time.Now().Add(l.opts.OpTimeout), abort: l.abort},
		func() {}
}

// stmtContext is stmtCtx's context: a deadline that no channel announces,
// and the caller's values. It implements context.Context itself, rather
// than embed context.WithoutCancel(caller): that was one more allocation
// for each of a try-lock+release's two statements. (Unlike that, it lets
// context.Cause see the caller's cause; nothing here or in pgx asks it of
// a statement's context, and no Done channel means nothing derived from
// it is ever cancelled through it.)
type stmtContext struct {
	caller   context.Context // its values; ends the waits for a session (waitCtx)
	deadline time.Time
	abort    context.Context
}

func (c stmtContext) Value(key any) any { return c.caller.Value(key) }

func (c stmtContext) Deadline() (time.Time, bool) { return c.deadline, true }

// until is c ending at dl if that comes first.
func (c stmtContext) until(dl time.Time) stmtContext {
	if dl.Before(c.deadline) {
		c.deadline = dl
	}
	return c
}
func (c stmtContext) Done() <-chan struct{} { return nil }

func (c stmtContext) Err() error {
	if c.abort.Err() != nil {
		return context.Canceled
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// waitCtx is ctx with a channel that ends at ctx's deadline or at Close's,
// and, for a stmtCtx, when its caller's context ends: for waits (see
// stmtCtx).
func (l *Locker) waitCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	parent := context.WithoutCancel(ctx)
	if sc, ok := ctx.(stmtContext); ok && sc.caller != nil {
		parent = sc.caller
	}
	wctx, cancel := context.WithCancel(parent)
	if dl, ok := ctx.Deadline(); ok {
		wctx, cancel = context.WithDeadline(wctx, dl)
	}
	stop := context.AfterFunc(l.abort, cancel)
	return wctx, func() { stop(); cancel() }
}

// bound sets the deadline of ctx (a stmtCtx) on s's connection, whose slot
// the caller just took: its statements fail with a timeout once it passes,
// and pgx closes the connection. After Close's deadline (l.abort) it is
// now: abortSessions may have run before this call set it.
func (l *Locker) bound(ctx context.Context, s *session) {
	nc := s.conn.PgConn().Conn()
	dl, _ := ctx.Deadline() // zero: none
	_ = nc.SetDeadline(dl)
	if l.abort.Err() != nil {
		_ = nc.SetDeadline(time.Now())
	}
}

// abortSessions moves every session's deadline to now (Close's deadline
// passed): statements in flight fail at once.
func (l *Locker) abortSessions() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sessions {
		if nc := s.conn.PgConn().Conn(); nc != nil {
			_ = nc.SetDeadline(time.Now())
		}
	}
}

// renewRound is one renew statement shared by every Renew of a session that
// joined before it was sent: one query per session and round trip however
// many of its locks renew at once, instead of one each.
//
// What a round checks, and why not always the same thing. The session's
// own bookkeeping (session.leases) says which locks it holds: they are
// taken and given back only by this Locker's statements on it, and the
// server frees them only when the session ends. So a round that proves the
// session alive, on its own backend (pg_backend_pid, which also catches a
// transaction pooler moving it), proves it still holds every lock the
// bookkeeping says: one cheap statement answers for all of them. Reading
// pg_locks checks the locks themselves, but it costs what the server's
// whole lock table costs (pg_lock_status copies it: about 18 ms with
// 10,000 advisory locks held), whichever locks are asked for; done on every
// renewal it made renewing 10,000 multiplexed locks take 22 s. A round
// reads pg_locks only when the session's last read is older than
// renewAudit: what that still catches is a lock freed behind the Locker's
// back on a live session (someone running pg_advisory_unlock on it, which
// nothing in this package does), within renewAudit; a session that died
// is found at once, and loses exactly its own locks, each reported lost.
type renewRound struct {
	done   chan struct{} // closed once the fields below are set
	joined int           // Renews answered by this round beyond its leader (under session.rmu)
	pid    uint32
	held   map[int64]struct{} // the lock ids the backend holds; nil: not read (trust the bookkeeping)
	err    error
	unsent bool // err came before the statement was sent: s is not in doubt
}

// renewAudit is how long a session's renew rounds trust its bookkeeping
// before one reads pg_locks again (see renewRound).
const renewAudit = 30 * time.Second

// renewOn returns a renew round of s sent after this call began: it
// joins the round not yet sent, or starts one. A round's statement goes
// out on a goroutine of its own, ahead of every other waiter for s's slot
// (urgent), bounded by OpTimeout and by Close, never by a caller's
// context: callers stop waiting for it at their own deadline (check),
// while the round still ends s if its statement fails (its locks are in
// doubt), or leaves s alone if it never got the slot.
func (l *Locker) renewOn(s *session) *renewRound {
	s.rmu.Lock()
	if r := s.round; r != nil {
		r.joined++
		s.rmu.Unlock()
		return r
	}
	r := &renewRound{done: make(chan struct{})}
	s.round = r
	s.rmu.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		s.rmu.Lock()
		if s.round == r {
			s.round = nil
		}
		s.rmu.Unlock()
		r.err, r.unsent = locking.ErrClosed, true
		close(r.done)
		return r
	}
	l.ops.Add(1) // Close waits for the round
	l.mu.Unlock()
	go l.sendRound(s, r)
	return r
}

// sendRound sends round r on s once it has s's slot, and answers it.
func (l *Locker) sendRound(s *session, r *renewRound) {
	defer l.ops.Done()
	defer close(r.done)
	ctx, cancel := l.stmtCtx(context.Background())
	defer cancel()
	err := l.useAs(ctx, s, true)
	// Calls from now on need a statement sent after them: a new round.
	s.rmu.Lock()
	s.round = nil
	audit := time.Since(s.audited) >= renewAudit
	s.rmu.Unlock()
	if err != nil {
		r.err, r.unsent = err, true
		return
	}
	s.rounds.Add(1)
	var ids []int64
	if audit {
		err = s.conn.QueryRow(ctx, renewSQL).Scan(&r.pid, &ids)
	} else {
		err = s.conn.QueryRow(ctx, pingSQL).Scan(&r.pid)
	}
	if err != nil {
		r.err = err
		l.killOwned(s, err)
		l.release(s)
		return
	}
	if audit {
		// Before the slot is given back: the next round, which may take
		// it at once, must see this audit.
		s.audits.Add(1)
		s.rmu.Lock()
		s.audited = time.Now()
		s.rmu.Unlock()
	}
	l.release(s)
	if !audit {
		return
	}
	r.held = make(map[int64]struct{}, len(ids))
	for _, id := range ids {
		r.held[id] = struct{}{}
	}
}
