package pg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	store "github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/locking"
)

var _ store.Store = (*Locker)(nil)

// trimThreshold is the row count past which a schedule's history is
// trimmed back to keep: keep plus a tenth of it (at least 1). The slack
// makes the trim run once every keep/10 runs of a schedule instead of
// every run, and keeps a history within 1.1×keep (DESIGN.md budgets
// keep × 5 KiB a schedule), well inside the contract's 2×keep.
func trimThreshold(keep int) int64 {
	return int64(keep) + int64(max(1, keep/10))
}

// ensureClusterConn creates the cluster tables once per Locker, if missing,
// under the lock that serialises the creation of bext_lock_fences.
func (l *Locker) ensureClusterConn(ctx context.Context, conn *pgx.Conn) error {
	if err := l.ensureSchemaConn(ctx, conn); err != nil {
		return err
	}
	if l.clusterOK.Load() {
		return nil
	}
	l.schemaMu.Lock()
	defer l.schemaMu.Unlock()
	if l.clusterOK.Load() {
		return nil
	}
	var exists bool
	if err := conn.QueryRow(ctx, clusterTablesExistSQL).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := conn.Exec(ctx, createClusterSQL); err != nil {
			return err
		}
	}
	l.clusterOK.Store(true)
	return nil
}

// withCluster is withSession on a session that has seen every table
// created.
// A cancelled ctx fails at once, without spending (and, by breaking it
// mid-query, closing) a session.
func (l *Locker) withCluster(ctx context.Context, fn func(context.Context, *pgx.Conn) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("locking/pg: %w", err)
	}
	return l.withSession(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		if err := l.ensureClusterConn(ctx, conn); err != nil {
			return err
		}
		return fn(ctx, conn)
	})
}

// RecordRuns stores runs in one statement (recordRunsSQL): one round trip
// whatever the batch size, with the trim of any history that grew past
// keep plus a tenth in that same statement. A run recorded twice (same
// schedule and run id) is stored once. Times are kept to the nanosecond.
func (l *Locker) RecordRuns(ctx context.Context, runs []store.Run, keep int) error {
	if err := store.CheckKeep(keep); err != nil {
		return err
	}
	n := len(runs)
	for _, r := range runs {
		if err := store.CheckRun(r); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("locking/pg: record runs: %w", err)
	}
	if n == 0 {
		return nil
	}
	// Planned on each call (QueryExecModeExec, an unnamed statement), on
	// the table's current size: with the cached prepared statement, filling
	// a fresh table was slower than refilling an analyzed one (30,000 runs:
	// 13.2 s against 8.8 s; planned each call: 9.5 s against 9.9 s).
	// Planning costs about 0.5 ms, against several for the statement.
	args := append([]any{pgx.QueryExecModeExec}, recordRunsArgs(l.opts.Namespace, keep, runs)...)
	return l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var ins, del, trimmed int64
		return conn.QueryRow(ctx, recordRunsSQL, args...).Scan(&ins, &del, &trimmed)
	})
}

// recordRunsArgs are recordRunsSQL's parameters for runs: one array per
// column.
func recordRunsArgs(namespace string, keep int, runs []store.Run) []any {
	n := len(runs)
	var (
		schedules = make([]string, n)
		ids       = make([]string, n)
		started   = make([]int64, n)
		ticks     = make([]int64, n)
		durations = make([]int64, n)
		fences    = make([]int64, n)
		attempts  = make([]int32, n)
		manual    = make([]bool, n)
		nodes     = make([]string, n)
		results   = make([]string, n)
		errs      = make([]string, n)
		tails     = make([]string, n)
		anomalies = make([]string, n)
		bys       = make([]string, n)
	)
	for i, r := range runs {
		r = store.Bound(r)
		schedules[i], ids[i] = r.Schedule, r.RunID
		started[i], ticks[i] = unixNano(r.StartedAt), unixNano(r.Tick)
		durations[i], fences[i], attempts[i], manual[i] = int64(r.Duration), r.Fence, int32(r.Attempts), r.Manual
		nodes[i], results[i], errs[i], tails[i] = r.Node, r.Result, r.Error, r.OutputTail
		anomalies[i], bys[i] = r.Anomaly, r.By
	}
	return []any{namespace, int64(keep), trimThreshold(keep),
		schedules, ids, started, ticks, durations, fences, attempts, manual, nodes, results, errs, tails, anomalies, bys}
}

// unixNano is t in nanoseconds since the epoch; the zero time stays 0 so
// it reads back as the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// Runs returns up to limit runs of schedule, newest first.
func (l *Locker) Runs(ctx context.Context, schedule string, limit int) ([]store.Run, error) {
	if err := store.CheckSchedule(schedule); err != nil {
		return nil, err
	}
	if err := store.CheckLimit(limit); err != nil {
		return nil, err
	}
	lim := int64(limit)
	var out []store.Run
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, runsSQL, l.opts.Namespace, schedule, lim)
		if err != nil {
			return err
		}
		out, err = scanRuns(rows)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LastRuns returns the newest run of each schedule that has one, in one
// query.
func (l *Locker) LastRuns(ctx context.Context, schedules []string) (map[string]store.Run, error) {
	for _, s := range schedules {
		if err := store.CheckSchedule(s); err != nil {
			return nil, err
		}
	}
	out := make(map[string]store.Run, len(schedules))
	if len(schedules) == 0 {
		return out, nil
	}
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, lastRunsSQL, l.opts.Namespace, schedules)
		if err != nil {
			return err
		}
		runs, err := scanRuns(rows)
		if err != nil {
			return err
		}
		clear(out)
		for _, r := range runs {
			out[r.Schedule] = r
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func scanRuns(rows pgx.Rows) ([]store.Run, error) {
	var (
		out                         []store.Run
		r                           store.Run
		started, tick, dur, attempt int64
	)
	_, err := pgx.ForEachRow(rows, []any{&r.Schedule, &r.RunID, &started, &tick, &dur, &r.Fence, &attempt,
		&r.Manual, &r.Node, &r.Result, &r.Error, &r.OutputTail, &r.Anomaly, &r.By}, func() error {
		r.StartedAt, r.Tick, r.Duration, r.Attempts = fromUnixNano(started), fromUnixNano(tick), time.Duration(dur), int(attempt)
		out = append(out, r)
		return nil
	})
	return out, err
}

// nodeDoc is what bext_nodes keeps of a Node besides its id and last seen
// (Node's own JSON leaves Schedules out: it is not part of the API).
type nodeDoc struct {
	Version    string            `json:"version"`
	StartedAt  time.Time         `json:"started_at"`
	ConfigHash string            `json:"config_hash"`
	Schedules  map[string]string `json:"schedules"`
	// Added later: nodes of older versions leave them out, and ignore
	// them.
	Ready         bool            `json:"ready,omitempty"`
	ClockOffsetNS *int64          `json:"clock_offset_ns,omitempty"`
	Running       []store.Running `json:"running,omitempty"`
	// Fields is absent in what nodes of earlier versions stored.
	Fields map[string]string `json:"fields,omitempty"`
	Tags   []string          `json:"tags,omitempty"` // absent before node tags
}

// Announce records n as live until ttl from now on the database clock,
// which also sets its LastSeen, and forgets the namespace's expired nodes.
func (l *Locker) Announce(ctx context.Context, n store.Node, ttl time.Duration) error {
	if err := store.CheckNode(n, ttl); err != nil {
		return err
	}
	doc, err := json.Marshal(nodeDoc{Version: n.Version, StartedAt: n.StartedAt, ConfigHash: n.ConfigHash, Schedules: n.Schedules,
		Ready: n.Ready, ClockOffsetNS: store.OffsetNanos(n.ClockOffset), Running: n.Running, Fields: n.Fields, Tags: n.Tags})
	if err != nil {
		return fmt.Errorf("locking/pg: %w: announce %q: %w", store.ErrInvalid, n.NodeID, err)
	}
	return l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var up, gone int64
		return conn.QueryRow(ctx, announceSQL, l.opts.Namespace, n.NodeID, ttl.Microseconds(), string(doc)).Scan(&up, &gone)
	})
}

// Nodes returns the namespace's live nodes (not expired on the database
// clock), sorted by NodeID.
func (l *Locker) Nodes(ctx context.Context) ([]store.Node, error) {
	var out []store.Node
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		out = out[:0]
		rows, err := conn.Query(ctx, nodesSQL, l.opts.Namespace)
		if err != nil {
			return err
		}
		var (
			id   string
			seen time.Time
			doc  []byte
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &seen, &doc}, func() error {
			var d nodeDoc
			if err := json.Unmarshal(doc, &d); err != nil {
				return fmt.Errorf("node %q: %w", id, err)
			}
			out = append(out, store.Node{NodeID: id, Version: d.Version, StartedAt: d.StartedAt,
				LastSeen: seen, ConfigHash: d.ConfigHash, Schedules: d.Schedules, Fields: d.Fields, Tags: d.Tags,
				Ready: d.Ready, ClockOffset: store.OffsetFromNanos(d.ClockOffsetNS), Running: d.Running})
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Leave removes a node's announcement.
func (l *Locker) Leave(ctx context.Context, nodeID string) error {
	if err := store.CheckNodeID(nodeID); err != nil {
		return err
	}
	return l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, leaveSQL, l.opts.Namespace, nodeID)
		return err
	})
}

// Enqueue stores reqs in order, durably, in one transaction and one round
// trip (a pipelined batch of two statements): the first takes a
// transaction-level advisory lock per schedule with a backfill among reqs,
// so two Enqueues of backfills of one schedule cannot both see its queue
// free of backfills. A request already stored (same id: a resent Enqueue)
// is stored once.
func (l *Locker) Enqueue(ctx context.Context, reqs []store.Request) error {
	n := len(reqs)
	var (
		schedules = make([]string, n)
		ids       = make([]string, n)
		backfill  = make([]bool, n)
		docs      = make([]string, n)
		lockIDs   []int64
	)
	for i, r := range reqs {
		if err := store.CheckRequest(r); err != nil {
			return err
		}
		doc, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("locking/pg: %w: enqueue %q: %w", store.ErrInvalid, r.ID, err)
		}
		schedules[i], ids[i], backfill[i], docs[i] = r.Schedule, r.ID, r.Backfill, string(doc)
		if r.Backfill {
			lockIDs = append(lockIDs, queueLockID(l.opts.Namespace, r.Schedule))
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("locking/pg: enqueue: %w", err)
	}
	if n == 0 {
		return nil
	}
	slices.Sort(lockIDs)
	lockIDs = slices.Compact(lockIDs)
	var busy []string
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var b pgx.Batch
		b.Queue(enqueueLockSQL, lockIDs)
		b.Queue(enqueueSQL, l.opts.Namespace, schedules, ids, backfill, docs)
		res := conn.SendBatch(ctx, &b)
		var (
			sc          string
			locks       int64
			stored, old int64
		)
		err := res.QueryRow().Scan(&sc, &locks)
		if err == nil {
			err = res.QueryRow().Scan(&busy, &stored, &old)
		}
		return errors.Join(err, res.Close())
	})
	if err != nil {
		return err
	}
	if len(busy) > 0 {
		return fmt.Errorf("%w: %q (nothing was queued)", store.ErrBusy, busy)
	}
	return nil
}

// queueLockID is the transaction-level advisory lock id of a schedule's
// queue, for Enqueue: derived like lockID in a namespace of its own, so it
// never blocks on the schedule's lock a run holds.
func queueLockID(namespace, schedule string) int64 {
	return lockID(namespace+"\x00requests", schedule)
}

// Queued returns the schedules with requests queued, sorted.
func (l *Locker) Queued(ctx context.Context) ([]string, error) {
	var out []string
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, queuedSQL, l.opts.Namespace)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Requests returns a schedule's queue, oldest first.
func (l *Locker) Requests(ctx context.Context, schedule string) ([]store.Request, error) {
	if err := store.CheckSchedule(schedule); err != nil {
		return nil, err
	}
	var out []store.Request
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		out = out[:0]
		rows, err := conn.Query(ctx, requestsSQL, l.opts.Namespace, schedule)
		if err != nil {
			return err
		}
		var doc []byte
		_, err = pgx.ForEachRow(rows, []any{&doc}, func() error {
			var r store.Request
			if err := json.Unmarshal(doc, &r); err != nil {
				return fmt.Errorf("a request of %q: %w", schedule, err)
			}
			out = append(out, r)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Done removes a finished backfill tick from its queue, durably. A trigger
// left the queue when it was taken: a no-op.
func (l *Locker) Done(ctx context.Context, req store.Request) error {
	if err := store.CheckRequest(req); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("locking/pg: done %q: %w", req.ID, err)
	}
	if !req.Backfill {
		return nil
	}
	return l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, doneSQL, l.opts.Namespace, req.Schedule, req.ID)
		return err
	})
}

// Accepted reports which node took request id of schedule, "" while none
// has.
func (l *Locker) Accepted(ctx context.Context, schedule, id string) (string, error) {
	if err := store.CheckSchedule(schedule); err != nil {
		return "", err
	}
	if id == "" {
		return "", fmt.Errorf("locking/pg: %w: accepted: empty request id", store.ErrInvalid)
	}
	var node string
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		node = ""
		err := conn.QueryRow(ctx, acceptedSQL, l.opts.Namespace, schedule, id).Scan(&node)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	return node, err
}

// Held reports whether the schedule's own lock (TryLock's id for the key
// schedule) is granted to any session of this database now.
func (l *Locker) Held(ctx context.Context, schedule string) (bool, error) {
	if err := store.CheckSchedule(schedule); err != nil {
		return false, err
	}
	hi, lo := splitID(lockID(l.opts.Namespace, schedule))
	var held bool
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("locking/pg: held %q: %w", schedule, err)
	}
	err := l.withSession(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, heldSQL, hi, lo).Scan(&held)
	})
	return held, err
}

// TakeRequest takes the schedule's lock and the head of its queue in one
// statement and one round trip (takeRequestSQL), on a session that then
// keeps the lock as TryLock's would: the Handle works with Renew and
// Release, and carries a fence drawn in that same statement from the
// key's row, so fences of triggered and regular runs of a schedule rise
// together. A lock this Locker holds answers Contended without asking
// (asking from its session would succeed by re-entrancy), unless it is
// the lock of this very take (same token): then the take is answered from
// it, its reply having been lost.
//
// A take with a token first asks takeResendSQL, which answers it from the
// record of an earlier attempt (bext_taken) when there is one: a taken
// trigger whose reply was lost (the connection broke after the commit,
// which also ended the session and its lock) is taken again, or goes back
// to its queue, rather than run nowhere. Every statement commits durably.
func (l *Locker) TakeRequest(ctx context.Context, r store.TakeReq) (store.Taken, error) {
	if err := store.CheckTake(r); err != nil {
		return store.Taken{}, err
	}
	schedule, ttl := r.Schedule, r.TTL
	if err := ctx.Err(); err != nil {
		return store.Taken{}, fmt.Errorf("locking/pg: take request %q: %w", schedule, err)
	}
	tok := r.Token
	if tok == "" {
		var err error
		if tok, err = locking.NewToken(); err != nil {
			return store.Taken{}, err
		}
	}
	id := lockID(l.opts.Namespace, schedule)
	resend := func(ls *lease) bool { return r.Token != "" && !ls.tick && ls.token == r.Token && ls.req != nil }
	// This take's own lease is asked about too (stillHeld): answered from a
	// lock its session lost unnoticed, the taker would be handed a trigger
	// that a take finding the lock free may have put back in its queue
	// (takeRequestSQL); asking Postgres decides it from the record.
	stillMine := func(ls *lease) bool { return resend(ls) && l.stillHeld(ctx, ls) }
	ok, mine, err := l.claimID(ctx, id, stillMine)
	if !ok {
		if err != nil {
			return store.Taken{}, err
		}
		if mine != nil && resend(mine) {
			mine.mu.Lock()
			done, heard := mine.done, mine.heard
			mine.mu.Unlock()
			if heard {
				// Its taker renewed the lock, so it has its answer: a late
				// copy, or the token reused, takes nothing
				// (store.Store.TakeRequest).
				return store.Taken{}, nil
			}
			if !done {
				// This take's own lock, held here: its answer was lost
				// on its way to the caller. A session's lock has no
				// TTL to extend.
				req := *mine.req
				return store.Taken{Request: &req, Handle: locking.NewHandle(l, schedule, tok, mine.fenceVal, ttl, mine)}, nil
			}
		}
		// Held here (a run of ours): answer with the head, not asking for
		// the lock.
		head, err := l.head(ctx, schedule)
		if err != nil || head == nil {
			return store.Taken{}, err
		}
		return store.Taken{Request: head, Contended: true}, nil
	}
	keep := 2 * max(ttl, l.MaxLease()).Microseconds()
	var (
		ls    *lease
		taken store.Taken
		asked bool
	)
	if r.Token != "" {
		ls, taken, asked, err = l.takeResend(ctx, id, r, tok, keep)
	}
	if !asked && err == nil {
		ls, taken, err = l.takeRequest(ctx, id, schedule, r.Node, r.Token, keep)
	}
	ls, serr := l.settle(ctx, id, ls)
	if ls == nil {
		if serr != nil {
			return store.Taken{}, serr
		}
		return taken, err
	}
	taken.Handle = locking.NewHandle(l, schedule, tok, ls.fenceVal, ttl, ls)
	return taken, nil
}

// takeResend runs takeResendSQL for take r on a shared session. asked is
// false when the token has no record: a fresh take decides.
func (l *Locker) takeResend(ctx context.Context, id int64, r store.TakeReq, tok string, keep int64) (ls *lease, tk store.Taken, asked bool, err error) {
	schedule := r.Schedule
	ctx, cancel := l.stmtCtx(ctx)
	defer cancel()
	s, _, err := l.acquire(ctx)
	if err == nil {
		if err = l.ensureClusterConn(ctx, s.conn); err != nil {
			if broken(s, err) {
				l.killOwned(s, err)
			}
			l.release(s)
			if pe := poolerErr(err); pe != nil {
				return nil, store.Taken{}, true, fmt.Errorf("locking/pg: take request %q: %w", schedule, pe)
			}
			return nil, store.Taken{}, true, fmt.Errorf("locking/pg: %w: take request %q: creating the cluster tables: %w", failure(err), schedule, err)
		}
	}
	if err != nil {
		return nil, store.Taken{}, true, fmt.Errorf("locking/pg: take request %q: %w", schedule, err)
	}
	var (
		v               string
		doc             []byte
		fence           *int64
		up, acc, queued int64
		pid             uint32
		syncCommit      string
	)
	err = s.conn.QueryRow(ctx, takeResendSQL, id, l.opts.Namespace, schedule, l.opts.Holder, r.Node, r.Token, keep).
		Scan(&v, &doc, &fence, &up, &acc, &queued, &pid, &syncCommit)
	if err != nil {
		// The statement may have taken the lock before failing.
		l.failed(ctx, s, id, err)
		return nil, store.Taken{}, true, queryErr("take request", schedule, err)
	}
	if pid != s.pid {
		err := fmt.Errorf("%w: take request %q ran on backend %d, the session's is %d", ErrTransactionPooler, schedule, pid, s.pid)
		l.killOwned(s, err)
		l.release(s)
		return nil, store.Taken{}, true, err
	}
	switch v {
	case "none":
		l.release(s)
		return nil, store.Taken{}, false, nil
	case "heard":
		// The take's taker was heard: this copy takes nothing
		// (store.Store.TakeRequest).
		l.release(s)
		return nil, store.Taken{}, true, nil
	}
	var req store.Request
	jerr := json.Unmarshal(doc, &req)
	switch {
	case v == "retake" && (jerr != nil || fence == nil || up != 1 || acc != 1 || syncCommit != "on"):
		l.giveBack(ctx, s, id)
		return nil, store.Taken{}, true, fmt.Errorf("locking/pg: %w: take request %q: took a resent take's request again with fence %v, %d records, %d acceptances, synchronous_commit %q: %v",
			locking.ErrUnavailable, schedule, fence, up, acc, syncCommit, jerr)
	case v == "retake":
		ls := &lease{id: id, key: schedule, sess: s, fenceVal: *fence, token: tok, req: &req}
		l.hold(ls)
		l.release(s)
		return ls, store.Taken{Request: &req}, true, nil
	}
	l.release(s)
	switch {
	case jerr != nil:
		return nil, store.Taken{}, true, fmt.Errorf("locking/pg: %w: take request %q: a resent take's record: %w", failure(jerr), schedule, jerr)
	case v == "held":
		// Not definite: the caller resends until the server drops the
		// first attempt's session (within MaxLease).
		return nil, store.Taken{}, true, fmt.Errorf("locking/pg: %w: take request %q: the session of this take's first attempt still holds the lock (Postgres drops it within %v)",
			locking.ErrResendHeld, schedule, l.MaxLease())
	case v == "requeue" && queued == 2:
		return nil, store.Taken{Request: &req, Contended: true}, true, nil
	}
	return nil, store.Taken{}, true, fmt.Errorf("locking/pg: %w: take request %q: a resent take answered %q (%d rows changed)", locking.ErrUnavailable, schedule, v, queued)
}

// takeRequest runs takeRequestSQL on a shared session, retrying once on a
// fresh connection when a reused session turns out dead (the statement then never reached
// Postgres, or its session's end released what it took).
func (l *Locker) takeRequest(ctx context.Context, id int64, schedule, node, token string, keep int64) (*lease, store.Taken, error) {
	ctx, cancel := l.stmtCtx(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		s, fresh, err := l.acquire(ctx)
		if err == nil {
			if err = l.ensureClusterConn(ctx, s.conn); err != nil {
				if broken(s, err) {
					l.killOwned(s, err)
				}
				l.release(s)
				if pe := poolerErr(err); pe != nil {
					return nil, store.Taken{}, fmt.Errorf("locking/pg: take request %q: %w", schedule, pe)
				}
				return nil, store.Taken{}, fmt.Errorf("locking/pg: %w: take request %q: creating the cluster tables: %w", failure(err), schedule, err)
			}
		}
		if err != nil {
			return nil, store.Taken{}, fmt.Errorf("locking/pg: take request %q: %w", schedule, err)
		}
		var (
			queued, ok bool
			unlocked   *bool
			doc, head  []byte
			fence      *int64
			accepted   int64
			pid        uint32
			syncCommit string
		)
		err = s.conn.QueryRow(ctx, takeRequestSQL, id, l.opts.Namespace, schedule, l.opts.Holder, node, token, keep).
			Scan(&queued, &ok, &unlocked, &doc, &fence, &accepted, &pid, &syncCommit, &head)
		if err != nil {
			// The statement may have taken the lock before failing.
			if l.failed(ctx, s, id, err) && !fresh && attempt == 0 && isConnError(err) && ctx.Err() == nil {
				continue
			}
			return nil, store.Taken{}, queryErr("take request", schedule, err)
		}
		if pid != s.pid {
			err := fmt.Errorf("%w: take request %q ran on backend %d, the session's is %d", ErrTransactionPooler, schedule, pid, s.pid)
			l.killOwned(s, err)
			l.release(s)
			return nil, store.Taken{}, err
		}
		if doc == nil {
			if ok && (unlocked == nil || !*unlocked) {
				// The lock was taken and not given back: end it.
				l.giveBack(ctx, s, id)
				return nil, store.Taken{}, fmt.Errorf("locking/pg: %w: take request %q: the lock was not given back", locking.ErrUnavailable, schedule)
			}
			l.release(s)
			if !queued || ok || head == nil {
				// An empty queue, or emptied by another node between this
				// statement's snapshot and its lock: nothing to run; or
				// only a trigger taken and not heard back, its lock held.
				return nil, store.Taken{}, nil
			}
			var req store.Request
			if err := json.Unmarshal(head, &req); err != nil {
				return nil, store.Taken{}, fmt.Errorf("locking/pg: %w: take request %q: the queue's head: %w", failure(err), schedule, err)
			}
			return nil, store.Taken{Request: &req, Contended: true}, nil
		}
		var req store.Request
		jerr := json.Unmarshal(doc, &req)
		if jerr != nil || fence == nil || accepted != 1 || syncCommit != "on" {
			l.giveBack(ctx, s, id)
			return nil, store.Taken{}, fmt.Errorf("locking/pg: %w: take request %q: took a request with fence %v, %d acceptances, synchronous_commit %q: %v",
				locking.ErrUnavailable, schedule, fence, accepted, syncCommit, jerr)
		}
		// Its token and request answer a resend of this take (TakeRequest).
		ls := &lease{id: id, key: schedule, sess: s, fenceVal: *fence, token: token, req: &req}
		l.hold(ls)
		l.release(s)
		return ls, store.Taken{Request: &req}, nil
	}
}

// head reads schedule's queue head, nil when the queue is empty.
func (l *Locker) head(ctx context.Context, schedule string) (*store.Request, error) {
	var req *store.Request
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var doc []byte
		err := conn.QueryRow(ctx, headSQL, l.opts.Namespace, schedule).Scan(&doc)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		req = new(store.Request)
		return json.Unmarshal(doc, req)
	})
	return req, err
}

// GiveBack ends the take h whose run will not start (store.Store's
// GiveBack): giveBackSQL puts its trigger back in its queue while its
// row is there (heard or not), on any session, durably; then h's lock is
// released on its own session by a plain release, whether giveBackSQL
// answered or not: a caller that gives up resending must not leave the
// lock held for as long as its session lives (advisory locks have no
// TTL). The plain release is no word that the take was heard, so a take
// not heard yet keeps its bext_taken row, put back by the next take that
// finds the lock free, and a heard one keeps its bext_taken_heard row for
// a resend. A lock already lost, or a release without an answer, ends
// with its session as any other. Resent (only giveBackSQL then: the lock
// was released), it finds no row once one give-back was applied, and puts
// nothing back.
func (l *Locker) GiveBack(ctx context.Context, h *locking.Handle) error {
	ls, err := l.leaseOf(h)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pg: give back %q: %w", ls.key, err)
	}
	var gerr error
	if ls.req != nil && ls.token != "" {
		var rows, requeued int64
		var sc string
		err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
			return conn.QueryRow(ctx, giveBackSQL, l.opts.Namespace, ls.key, ls.token).Scan(&rows, &requeued, &sc)
		})
		switch {
		case err == nil:
		case ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled):
			gerr = fmt.Errorf("pg: give back %q: %w", ls.key, context.Cause(ctx))
		default:
			gerr = fmt.Errorf("%w: pg: give back %q: %w", failure(err), ls.key, err)
		}
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if !ls.done {
		ls.heard = true // a plain release (releaseSQL), never releaseTakeSQL
		_ = l.unlock(ctx, ls)
	}
	return gerr
}
