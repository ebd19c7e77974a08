package pg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bext-dev/bext-scheduler/locking"
)

// tickBatch bounds the requests of one round trip of TryLockTicks: enough
// to carry a burst in a few, few enough that Postgres answers one well
// within OpTimeout (a tick statement takes a fraction of a millisecond).
const tickBatch = 500

// TryLockTicks is TryLockTick for many requests at once
// (locking.TickBatcher): a burst of ticks due in the same second costs a few round
// trips instead of one per tick. answers[i] and errs[i] are what
// TryLockTick would have returned for reqs[i]; TryLockTick is this for one
// request. Each round trip is a pgx batch on one session of two
// statements over arrays of requests (sql.go: lockRowsSQL locks the rows,
// tryLockTicksSQL decides), so the locks it takes are taken on the
// session that will hold, renew and release them.
//
// The batch is one transaction (the extended protocol's implicit one, up
// to the batch's single Sync), so it commits once: one WAL flush for all
// the marks it raises, and one notification-queue lock for all the marks
// it tells. Its rows are locked in one order every node uses (by key,
// bytewise): two nodes' batches over the same schedules wait for each
// other, never deadlock. Requests whose lock id this Locker holds or asks
// for are answered without asking, as TryLockTick answers them; two of one
// batch with one lock id: the second is contended, as for two concurrent
// TryLockTicks. Two with one row key (per-tick locks of one schedule) are
// decided one after the other (tickRounds).
//
// An error of the round trip (a failed statement rolls the whole batch
// back) is the error of every request in it; the advisory locks its
// statements took are given back (the session's end gives them back when
// the connection broke), and a reused session found dead is retried once
// on a fresh one, as TryLockTick does.
func (l *Locker) TryLockTicks(ctx context.Context, reqs []locking.TickRequest) (answers []locking.TickAnswer, errs []error) {
	answers, errs = make([]locking.TickAnswer, len(reqs)), make([]error, len(reqs))
	calls := make([]tickCall, 0, len(reqs))
	index := make([]int, 0, len(reqs)) // calls[j] is reqs[index[j]]
	for i, req := range reqs {
		c, ans, err, answered := l.startTick(ctx, req)
		if answered {
			answers[i], errs[i] = ans, err
			continue
		}
		calls = append(calls, c)
		index = append(index, i)
	}
	for _, round := range tickRounds(calls) {
		for len(round) > 0 {
			n := min(len(round), tickBatch)
			batch := make([]tickCall, n)
			for k, j := range round[:n] {
				batch[k] = calls[j]
			}
			leases, ans, cerrs := l.tryLockTickBatch(ctx, batch)
			for k, j := range round[:n] {
				i := index[j]
				answers[i], errs[i] = l.finishTick(ctx, calls[j], leases[k], ans[k], cerrs[k])
			}
			round = round[n:]
		}
	}
	return answers, errs
}

// tryLockTickBatch sends calls (ids claimed, row keys distinct) in one
// batch on one session and reads their answers: lockRowsSQL then
// tryLockTicksSQL, in one round trip and one transaction.
func (l *Locker) tryLockTickBatch(ctx context.Context, calls []tickCall) (leases []*lease, answers []locking.TickAnswer, errs []error) {
	n := len(calls)
	leases, answers, errs = make([]*lease, n), make([]locking.TickAnswer, n), make([]error, n)
	fail := func(err func(c *tickCall) error) ([]*lease, []locking.TickAnswer, []error) {
		for j := range calls {
			leases[j], answers[j], errs[j] = nil, locking.TickAnswer{}, err(&calls[j])
		}
		return leases, answers, errs
	}

	params := newTickParams(calls)
	ctx, cancel := l.stmtCtx(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		s, fresh, err := l.acquireReady(ctx)
		if err != nil {
			return fail(func(c *tickCall) error { return fmt.Errorf("locking/pg: try-lock-tick %q: %w", c.req.Key, err) })
		}
		rows := make([]tickRow, n)
		br := s.conn.SendBatch(ctx, l.tickStatements(params, l.lockTimeoutOn(s)))
		err = readTickRows(br, rows)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			// Rolled back, but the statements before the failure may have
			// taken their locks (session locks outlive a rollback).
			killed := l.failedBatch(ctx, s, calls, err)
			if killed && !fresh && attempt == 0 && isConnError(err) && ctx.Err() == nil {
				continue
			}
			if !killed && isLockTimeout(err) && l.waitLeft(ctx) > 2*l.lockTimeout {
				// Waited lockTimeout on a row: nothing was decided, the
				// slot went to the session's renewals, and the batch asks
				// again, as long as OpTimeout leaves room for a whole wait.
				attempt--
				continue
			}
			return fail(func(c *tickCall) error { return queryErr("try-lock-tick", c.req.Key, err) })
		}
		for j := range rows {
			if rows[j].pid != s.pid {
				err := fmt.Errorf("%w: try-lock-tick ran on backend %d, the session's is %d", ErrTransactionPooler, rows[j].pid, s.pid)
				l.killOwned(s, err)
				l.release(s)
				return fail(func(c *tickCall) error { return fmt.Errorf("locking/pg: try-lock-tick %q: %w", c.req.Key, err) })
			}
		}
		var giveBack []int64
		for j := range calls {
			var unlock bool
			leases[j], answers[j], errs[j], unlock = l.tickAnswer(s, &calls[j], &rows[j])
			if unlock {
				giveBack = append(giveBack, calls[j].id)
			}
		}
		if len(giveBack) > 0 {
			l.giveBackAll(ctx, s, giveBack)
		} else {
			l.release(s)
		}
		return leases, answers, errs
	}
}

// lockTimeout bounds one wait of a tick batch on a row (another node's
// batch, an operator's transaction): a tenth of OpTimeout (500 ms by
// default, half the default renewal period), at least 250 ms (far above
// one batch's wait behind another's commit), at most half of OpTimeout.
//
// The session's statement slot is held while a statement waits, and the
// renewals of every lock on that session, which go before any statement
// queued for it (pool.go), still wait for the one in flight: unbounded,
// a batch stuck on one schedule's row held up the renewals of the other
// schedules' locks past their deadline, and its OpTimeout broke the
// connection and so ended those locks. Bounded, the statement fails alone,
// answered by the server (SQLSTATE 55P03), and the session lives on; the
// batch gives the slot up and asks again while OpTimeout leaves room, and
// then fails with ErrUnavailable (not decided: the caller may resend).
// Only on a session that holds locks (lockTimeoutOn): asking again puts
// the batch at the back of the row's queue.
func lockTimeout(opTimeout time.Duration) time.Duration {
	return min(max(opTimeout/10, 250*time.Millisecond), opTimeout/2)
}

// lockTimeoutOn is the lock_timeout setting of a tick batch on s, whose
// slot the caller holds: lockTimeout while s holds locks, whose renewals
// must not wait behind the batch; none (0) on a session that holds none,
// where the batch keeps its place in the row's queue (another node's
// batches) for as long as OpTimeout allows, as before.
func (l *Locker) lockTimeoutOn(s *session) string {
	l.mu.Lock()
	held := len(s.leases) > 0
	l.mu.Unlock()
	if held {
		return l.lockTimeoutSetting
	}
	return "0"
}

// isLockTimeout tells a statement that waited lock_timeout on a lock.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// waitLeft is how long the call of ctx (a stmtCtx) may still wait: until
// the sooner of its OpTimeout bound and its caller's deadline.
func (l *Locker) waitLeft(ctx context.Context) time.Duration {
	dl, _ := ctx.Deadline()
	if sc, ok := ctx.(stmtContext); ok && sc.caller != nil {
		if cdl, ok := sc.caller.Deadline(); ok && cdl.Before(dl) {
			dl = cdl
		}
	}
	return time.Until(dl)
}

// tickRounds splits calls into rounds in which no row key comes twice
// (tryLockTicksSQL's UPDATE may change a row once): round k holds the k-th
// request of each key, as asked. A burst is one round. A key asked twice
// in one batch (per-tick locks of one schedule) is decided in a round
// trip of its own, sent once the round before it was answered, as two
// TryLockTicks one after the other would be; the row keeps both grants
// for their resends (tick_grants, sql.go), so after a lost reply neither
// is answered done (TestPerTickBatchResentAfterLostReply).
func tickRounds(calls []tickCall) [][]int {
	seen := make(map[string]int, len(calls))
	var rounds [][]int
	for j := range calls {
		k := seen[calls[j].req.Key]
		seen[calls[j].req.Key] = k + 1
		if k == len(rounds) {
			rounds = append(rounds, make([]int, 0, len(calls)))
		}
		rounds[k] = append(rounds[k], j)
	}
	return rounds
}

// tickParams are tryLockTicksSQL's per-request arrays.
type tickParams struct {
	keys, tokens                                    []string
	ids, ticks, floors, skews, windows, keeps, ttls []int64
	perTick, resends, owned                         []bool
}

func newTickParams(calls []tickCall) tickParams {
	n := len(calls)
	a := tickParams{keys: make([]string, n), tokens: make([]string, n), ids: make([]int64, n),
		ticks: make([]int64, n), floors: make([]int64, n), skews: make([]int64, n), windows: make([]int64, n),
		keeps: make([]int64, n), ttls: make([]int64, n), perTick: make([]bool, n), resends: make([]bool, n),
		owned: make([]bool, n)}
	for i := range calls {
		c := &calls[i]
		r := &c.req
		a.keys[i], a.tokens[i], a.ids[i] = r.Key, c.token, c.id
		a.ticks[i], a.floors[i] = r.Tick.UnixMicro(), r.Floor.UnixMicro()
		a.skews[i], a.windows[i], a.keeps[i] = r.MaxSkew.Microseconds(), r.Window.Microseconds(), c.keep
		a.perTick[i], a.ttls[i], a.resends[i] = r.PerTick, r.TTL.Microseconds(), r.Resend
		a.owned[i] = r.Token != ""
	}
	return a
}

// tickStatements is a try-lock-tick's round trip for the requests of a:
// the batch's lock_timeout (lockTimeoutOn), lockRowsSQL, then
// tryLockTicksSQL (warm sends it with none, to prepare them on a session).
func (l *Locker) tickStatements(a tickParams, lockTimeout string) *pgx.Batch {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, 3)}
	b.Queue(lockTimeoutSQL, lockTimeout)
	b.Queue(lockRowsSQL, l.opts.Namespace, a.keys)
	b.Queue(tryLockTicksSQL, l.opts.Namespace, l.opts.Holder, l.channel,
		a.keys, a.ids, a.ticks, a.floors, a.skews, a.windows, a.tokens, a.keeps, a.perTick, a.ttls, a.resends, a.owned)
	return b
}

// readTickRows reads the results of the lock_timeout and of lockRowsSQL,
// then tryLockTicksSQL's rows into rows (by the request's place). Every
// request must be answered once.
func readTickRows(br pgx.BatchResults, rows []tickRow) error {
	if _, err := br.Exec(); err != nil {
		return err
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	qr, err := br.Query()
	if err != nil {
		return err
	}
	defer qr.Close()
	answered := 0
	for qr.Next() {
		var ord int64
		var row tickRow
		if err := qr.Scan(append([]any{&ord}, row.dest()...)...); err != nil {
			return err
		}
		if ord < 1 || ord > int64(len(rows)) || rows[ord-1].verdict != "" {
			return fmt.Errorf("locking/pg: %w: try-lock-tick answered request %d of %d twice or out of range", locking.ErrUnavailable, ord, len(rows))
		}
		rows[ord-1] = row
		answered++
	}
	if err := qr.Err(); err != nil {
		return err
	}
	if answered != len(rows) {
		return fmt.Errorf("locking/pg: %w: try-lock-tick answered %d of %d requests", locking.ErrUnavailable, answered, len(rows))
	}
	return nil
}

// failedBatch is failed for a batch: a session in doubt is killed (its end
// frees the locks); on a live one, every claimed id of the batch is given
// back. It releases s's slot and reports whether s was killed.
func (l *Locker) failedBatch(ctx context.Context, s *session, calls []tickCall, err error) (killed bool) {
	if broken(s, err) {
		l.killOwned(s, err)
		l.release(s)
		return true
	}
	ids := make([]int64, len(calls))
	for j := range calls {
		ids[j] = calls[j].id
	}
	return l.giveBackAll(ctx, s, ids)
}

// giveBackAll is giveBack for many ids in one statement. An id s does not
// hold is skipped (pg_advisory_unlock answers false, with a warning): the
// ids are claimed, so none is held by another lease of this Locker.
func (l *Locker) giveBackAll(ctx context.Context, s *session, ids []int64) (killed bool) {
	if _, err := s.conn.Exec(ctx, giveBackAllSQL, ids); err != nil {
		l.killOwned(s, err)
		l.release(s)
		return true
	}
	l.release(s)
	return false
}
