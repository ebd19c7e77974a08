package pg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/locking"
)

// TryLockTick is try-lock-tick (locking.TickLocker) in one statement and
// one round trip (sql.go, lockRowsSQL and tryLockTicksSQL): the advisory lock, the mark, the
// fence and the pause flag, decided on the database clock. The mark, pause
// and grants live in the key's bext_lock_fences row. A resend (same Token
// and T) whose grant's lock is free (its session died with the lost reply)
// takes it again; one whose lock the first attempt's session still holds
// is answered with an error wrapping locking.ErrResendHeld. A lock this
// Locker holds answers without asking (asking from its session would
// succeed by re-entrancy): granted from that lock for a resent call of the
// request holding it (same key, T and Token; its lease is the live
// session's lock; with the grant's Before), done when it was granted for T or a later tick, else
// contended. A request carrying its caller's Token answered paused or
// missed leaves a 'T/token' entry in the row's tick_grants, as a resend's
// contended or done does: its resend after a lost reply is told the same.
//
// T is taken at microsecond precision.
func (l *Locker) TryLockTick(ctx context.Context, req locking.TickRequest) (locking.TickAnswer, error) {
	c, ans, err, asked := l.startTick(ctx, req)
	if asked {
		return ans, err
	}
	ls, ans, err := l.tryLockTick(ctx, c)
	return l.finishTick(ctx, c, ls, ans, err)
}

// tickCall is one try-lock-tick on its way to Postgres, its lock id
// claimed (claimID): finishTick settles it.
type tickCall struct {
	req     locking.TickRequest
	token   string
	lockKey string // the advisory lock's key: the schedule's, or the tick's
	id      int64
	// keep is how long (µs) its grant stays recognisable to a resend once
	// granted or resent (tryLockTicksSQL's until): locking.GrantKeep.
	keep int64
}

// startTick checks req and claims its lock id. answered is true when the
// answer is known without a statement (an invalid request, the
// re-entrancy guard): ans and err are then the answer, and nothing is
// claimed. Otherwise c is claimed and must be settled by finishTick.
func (l *Locker) startTick(ctx context.Context, req locking.TickRequest) (c tickCall, ans locking.TickAnswer, err error, answered bool) {
	if err := locking.CheckTickRequest(req); err != nil {
		return c, ans, err, true
	}
	if err := ctx.Err(); err != nil {
		return c, ans, fmt.Errorf("locking/pg: try-lock-tick %q: %w", req.Key, err), true
	}
	token := req.Token
	if token == "" {
		if token, err = locking.NewToken(); err != nil {
			return c, ans, err, true
		}
	}
	lockKey := req.Key
	if req.PerTick {
		lockKey = locking.TickLockKey(req.Key, req.Tick)
	}
	c = tickCall{req: req, token: token, lockKey: lockKey, id: lockID(l.opts.Namespace, lockKey)}
	// A resend comes while the caller still counts on its lease (TTL), or
	// later when it was told resend_held until the server dropped the first
	// call's session (within MaxLease); and for as long again, for a
	// resend that could not reach the server meanwhile: the first call's
	// statement timed out, its session was ended, and a new one cannot be
	// set up over a link whose replies come late (the scheduler resends for
	// as long: scheduler/resend.go).
	c.keep = locking.GrantKeep(req.TTL, l.MaxLease()).Microseconds()
	tickUS := req.Tick.UnixMicro()
	resend := func(ls *lease) bool {
		return ls.tick && ls.token == token && ls.tickUS == tickUS && ls.rowKey == req.Key
	}
	ok, mine, err := l.claimID(ctx, c.id, resend)
	if ok {
		return c, ans, nil, false
	}
	if err != nil {
		return c, ans, err, true
	}
	if mine != nil && resend(mine) {
		mine.mu.Lock()
		done := mine.done
		mine.mu.Unlock()
		if !done {
			h := locking.NewHandle(l, req.Key, token, mine.fenceVal, req.TTL, mine)
			ans := locking.TickAnswer{Verdict: locking.TickGranted, Handle: h, Mark: req.Tick}
			if mine.before != nil { // the grant's, answered again
				ans.Before = time.UnixMicro(*mine.before)
			}
			return c, ans, nil, true
		}
		// Released meanwhile: ask again (Postgres answers done).
		ans, err := l.TryLockTick(ctx, req)
		return c, ans, err, true
	}
	if mine != nil && mine.tick && mine.rowKey == req.Key && mine.tickUS >= tickUS {
		// The lock we hold was granted for T or later: the mark is
		// there already, and done comes before contended.
		return c, locking.TickAnswer{Verdict: locking.TickDone, Mark: time.UnixMicro(mine.tickUS)}, nil, true
	}
	return c, locking.TickAnswer{Verdict: locking.TickContended}, nil, true
}

// finishTick settles c's claimed id with the statement's outcome and
// makes the handle of a grant.
func (l *Locker) finishTick(ctx context.Context, c tickCall, ls *lease, ans locking.TickAnswer, err error) (locking.TickAnswer, error) {
	ls, serr := l.settle(ctx, c.id, ls)
	if serr != nil {
		return locking.TickAnswer{}, serr
	}
	if ls != nil {
		ans.Handle = locking.NewHandle(l, c.req.Key, c.token, ls.fenceVal, c.req.TTL, ls)
	}
	return ans, err
}

// tickRow is tryLockTicksSQL's answer row for one request.
type tickRow struct {
	verdict    string
	fence      *int64
	mark       *int64
	before     *int64 // the stored mark a raising step found (TickAnswer.Before)
	nowUS      int64
	pid        uint32
	syncCommit string
}

func (r *tickRow) dest() []any {
	return []any{&r.verdict, &r.fence, &r.mark, &r.before, &r.nowUS, &r.pid, &r.syncCommit}
}

// tryLockTick is tryLockTickBatch of one.
func (l *Locker) tryLockTick(ctx context.Context, c tickCall) (*lease, locking.TickAnswer, error) {
	leases, answers, errs := l.tryLockTickBatch(ctx, []tickCall{c})
	return leases[0], answers[0], errs[0]
}

// tickAnswer reads c's answer row from session s (s's slot held), recording
// a grant as held on s. unlock says the statement may have left c's lock
// taken on s without a grant to keep it: the caller gives it back.
func (l *Locker) tickAnswer(s *session, c *tickCall, row *tickRow) (ls *lease, ans locking.TickAnswer, err error, unlock bool) {
	req := &c.req
	ans = locking.TickAnswer{Now: time.UnixMicro(row.nowUS)}
	if row.mark != nil {
		ans.Mark = time.UnixMicro(*row.mark)
	}
	if row.before != nil {
		ans.Before = time.UnixMicro(*row.before)
	}
	switch row.verdict {
	case "granted":
		if row.fence == nil || row.syncCommit != "on" {
			return nil, locking.TickAnswer{}, fmt.Errorf("locking/pg: %w: try-lock-tick %q: granted with fence %v and synchronous_commit %q",
				locking.ErrUnavailable, req.Key, row.fence, row.syncCommit), true
		}
		ans.Verdict = locking.TickGranted
		var before *int64 // a copy: the row's may be scanned into again
		if row.before != nil {
			b := *row.before
			before = &b
		}
		ls := &lease{id: c.id, key: c.lockKey, sess: s, fenceVal: *row.fence,
			tick: true, grantOpen: true, rowKey: req.Key, token: c.token, tickUS: req.Tick.UnixMicro(), before: before}
		l.hold(ls)
		return ls, ans, nil, false
	case "done":
		ans.Verdict = locking.TickDone
	case "contended":
		ans.Verdict = locking.TickContended
	case "paused":
		ans.Verdict = locking.TickPaused
	case "missed":
		ans.Verdict = locking.TickMissed
	case "expired":
		if row.fence == nil {
			return nil, locking.TickAnswer{}, fmt.Errorf("locking/pg: %w: try-lock-tick %q: expired without the grant's fence", locking.ErrUnavailable, req.Key), true
		}
		ans.Verdict, ans.Fence = locking.TickExpired, *row.fence
	case "ahead":
		return nil, locking.TickAnswer{}, &locking.AheadError{Key: req.Key, Tick: req.Tick,
			Offset: req.Tick.Sub(ans.Now), MaxSkew: req.MaxSkew}, false
	case "resend_held":
		// Not definite: the caller resends until decided.
		return nil, locking.TickAnswer{}, fmt.Errorf("locking/pg: %w: try-lock-tick %q: this request already claimed %s, and the session of its first attempt still holds the lock (Postgres drops it within %v)",
			locking.ErrResendHeld, req.Key, req.Tick.UTC().Format(time.RFC3339Nano), l.MaxLease()), false
	default:
		return nil, locking.TickAnswer{}, fmt.Errorf("locking/pg: %w: try-lock-tick %q: unknown verdict %q", locking.ErrUnavailable, req.Key, row.verdict), true
	}
	return nil, ans, nil, false
}

// InitMarks creates, in one statement, the mark of every key that has none,
// at the database clock; existing marks stay as they are. The first call
// also readies the sessions a burst of ticks will use (warm).
func (l *Locker) InitMarks(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := locking.CheckKey(k); err != nil {
			return err
		}
	}
	if len(keys) == 0 {
		return nil
	}
	// Distinct: an upsert meeting one row twice fails (SQLSTATE 21000) when
	// it creates or updates that row, and callers may name a key twice (the
	// scheduler's recovery probe sends its unmarked and its owed schedules,
	// and after an outage at start every locked schedule is both).
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	err := l.withTable(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, initMarksSQL, l.opts.Namespace, keys)
		return err
	})
	if err == nil && l.warmed.CompareAndSwap(false, true) {
		l.warm(ctx)
	}
	return err
}

// warmConnect bounds how long warm waits for each session it opens: far
// above a connection's setup on a live server (a few ms), far below the
// scheduler's start bound (2 s).
const warmConnect = 500 * time.Millisecond

// warmSessions is how many sessions warm readies: as many as the
// scheduler's batcher keeps busy at once in a burst (its maxSenders).
const warmSessions = 4

// warm opens up to warmSessions sessions (no more than MaxSessions) and
// prepares the try-lock-tick statements on each, so that a burst of ticks
// does not wait for connections and first statements. Sessions open
// lazily, when every open one is busy: the first burst after start paid
// for up to three connections (dial, probe, settings) and the statements'
// preparing before its batches went out, 60 to 120 ms on a loaded 2-core
// machine for 1,000 ticks on three nodes (BenchmarkBurstPostgres). Best
// effort: a session that fails is dropped, as after any failed statement,
// and the burst opens what it needs as before.
func (l *Locker) warm(ctx context.Context) {
	// Bounded as every statement is (stmtCtx), and by the caller's
	// deadline when that comes first (the scheduler's start waits 2 s at
	// most): InitMarks's caller may have no deadline, and a server that
	// stops answering must not hang it.
	sctx, cancel := l.stmtCtx(ctx)
	defer cancel()
	sc := sctx.(stmtContext)
	if dl, ok := ctx.Deadline(); ok {
		sc = sc.until(dl)
	}
	ctx = sc
	n := min(l.opts.MaxSessions, warmSessions)
	// Each session is readied as soon as it is had, and held (so the next
	// acquire opens another) until the end: one that cannot be had in time
	// (a pooler's queue, a slow server) leaves those before it ready.
	held := make([]*session, 0, n)
	defer func() {
		for _, s := range held {
			l.release(s)
		}
	}()
	for range n {
		if !l.idleOrRoom() {
			// Every session may be open and each is busy (one of them
			// with a slot warm holds): acquiring would wait for a slot.
			return
		}
		// Each session gets warmConnect to be had: one that waits in a
		// pooler's queue for a server connection never comes, and the
		// scheduler's start waits for warm.
		s, _, err := l.acquireReady(sc.until(time.Now().Add(warmConnect)))
		if err != nil {
			return
		}
		l.bound(ctx, s) // the statements below get warm's own deadline
		if err := s.conn.SendBatch(ctx, l.tickStatements(newTickParams(nil), l.lockTimeoutSetting)).Close(); err != nil {
			l.killOwned(s, err)
			l.release(s)
			return
		}
		held = append(held, s)
	}
}

// idleOrRoom says whether a session can be had without waiting for a busy
// one's slot: one is idle, or another may be opened.
func (l *Locker) idleOrRoom() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open < l.opts.MaxSessions {
		return true
	}
	for _, s := range l.sessions {
		if s.busy == 0 {
			return true
		}
	}
	return false
}

// SetPause sets key's pause flag, durably, in its row: every try-lock-tick
// that starts after SetPause returns reads it.
func (l *Locker) SetPause(ctx context.Context, key string, p locking.Pause) error {
	if err := locking.CheckKey(key); err != nil {
		return err
	}
	var until *time.Time
	if !p.Until.IsZero() {
		u := p.Until
		until = &u
	}
	return l.withTable(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, setPauseSQL, l.opts.Namespace, key, p.Paused, until, p.Note)
		return err
	})
}

// GetPause reads key's pause flag as stored (an expired Until included;
// Pause.Active tells). A key never paused has the zero Pause.
func (l *Locker) GetPause(ctx context.Context, key string) (locking.Pause, error) {
	if err := locking.CheckKey(key); err != nil {
		return locking.Pause{}, err
	}
	var p locking.Pause
	err := l.withTable(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		p = locking.Pause{}
		var until *time.Time
		err := conn.QueryRow(ctx, getPauseSQL, l.opts.Namespace, key).Scan(&p.Paused, &until, &p.Note)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if until != nil {
			p.Until = *until
		}
		return err
	})
	return p, err
}

// withTable is withSession on a session that has seen the table created.
func (l *Locker) withTable(ctx context.Context, fn func(context.Context, *pgx.Conn) error) error {
	return l.withSession(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		if err := l.ensureSchemaConn(ctx, conn); err != nil {
			return err
		}
		return fn(ctx, conn)
	})
}

// MaxLease is how long a lock is certain to outlive its holder's last
// successful TryLock, TryLockTick or Renew (locking.LeaseBounder): the
// soonest Postgres drops the session of a holder that fell silent, and
// with it its advisory locks, under the keepalive and TCP user timeout
// settings every session gets (session.go). With TCP_USER_TIMEOUT the
// server's kernel drops a silent peer once its data went unacknowledged
// that long; where the server ignores tcp_user_timeout (not Linux), after
// the idle time and count unanswered keepalive probes. The smaller of the
// two is the bound. Settings the URL gives itself are not accounted for.
func (l *Locker) MaxLease() time.Duration {
	return l.times.maxLease()
}
