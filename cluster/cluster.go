// Package cluster owns the contract of the cluster state that operators see
// and steer (DESIGN.md "Operating it"): run history, live nodes, manual
// run requests (trigger and backfill). Pause flags are part of the lock
// contract (locking.Pauser), because try-lock-tick reads them in its atomic
// step. The state lives in the backend the locks use: every lock backend
// (locking/memory, locking/redis, locking/pg) implements Store, and all of
// them pass one conformance suite, cluster/clustertest.
//
// Nothing here is on a tick's critical path: runs are recorded after the
// run, in batches; nodes announce themselves every few seconds; requests
// are looked for once a second.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Run is one finished run of a schedule, as history keeps it. The JSON
// names are the contract of `history --json` and the HTTP API.
type Run struct {
	Schedule   string        `json:"schedule"`
	Tick       time.Time     `json:"tick"`
	Node       string        `json:"node"`
	Result     string        `json:"result"` // a bext_scheduler_runs_total result
	StartedAt  time.Time     `json:"started_at"`
	Duration   time.Duration `json:"-"`
	Fence      int64         `json:"fence"`
	Manual     bool          `json:"manual"`
	Attempts   int           `json:"attempts"`
	Error      string        `json:"error"`       // one line, secrets masked, "" on success
	RunID      string        `json:"run_id"`      // unique per run, the same across its retries
	OutputTail string        `json:"output_tail"` // the last MaxOutputTail bytes of output, masked
	// Anomaly is what the node that ran it found suspicious in its
	// duration: AnomalyOverrun, AnomalyTooFast, or "" (JSON null).
	Anomaly string `json:"anomaly"`
	// By is who asked for a manual run (the request's By: CLI
	// user@host, "api"); "" (JSON null) for a scheduled run.
	By string `json:"by"`
}

// Anomalies of a run (Run.Anomaly), the kind label of
// bext_scheduler_run_anomalies_total.
const (
	// AnomalyOverrun: the run took longer than its expected_runtime.
	AnomalyOverrun = "overrun"
	// AnomalyTooFast: a success faster than its min_runtime.
	AnomalyTooFast = "too_fast"
)

// MaxOutputTail bounds Run.OutputTail, so a schedule's history costs at
// most keep × (MaxOutputTail + about 1 KiB).
const MaxOutputTail = 4096

// MaxErrorLen bounds Run.Error.
const MaxErrorLen = 512

// DefaultKeep is how many runs per schedule history keeps by default
// (`[history] keep`).
const DefaultKeep = 100

// ResultRunning is the result of a run's provisional record: written
// when its first attempt starts (Attempts 0), so that a run whose node dies
// before it ends is still in history, with its node and fence. Its final
// record (Attempts > 0) replaces it, as it replaces an unstarted one (see
// RecordRuns). `audit` shows a tick whose record stayed running, its node
// gone, as ran with result running.
const ResultRunning = "running"

// Skip is a tick consumed without a run, as history keeps it: a decision
// that raised the schedule's mark to the tick, or past it, and started
// nothing. With the runs it lets `audit` account for every tick of a
// schedule: a tick the mark passed with neither a run nor a skip is lost.
// The JSON names are the contract of the audit's sources.
type Skip struct {
	Schedule string    `json:"schedule"`
	Tick     time.Time `json:"tick"`
	Node     string    `json:"node"`   // the node that decided it
	Reason   string    `json:"reason"` // one of the Skip reasons below
	// Note says more: the pause's note, or why a tick was stopped.
	Note string    `json:"note"`
	At   time.Time `json:"at"` // when it was decided, on the deciding node's clock
}

// The reasons of a Skip (the `reason` of `audit`, a contract).
const (
	// SkipPaused: the schedule was paused cluster-wide at the tick.
	SkipPaused = "paused"
	// SkipMissed: the tick was decided later than its catch-up window.
	SkipMissed = "missed"
	// SkipOverlap: a run of the schedule still held its lock at the tick
	// (overlap = "skip").
	SkipOverlap = "overlap"
	// SkipStopped: no node asked for the tick before the mark passed it
	// (every node stopped, or none reaching the backend); recorded by the
	// node whose decision raised the mark over it.
	SkipStopped = "stopped"
	// SkipGroupFull: granted, but the schedule's concurrency group already
	// ran max_running runs, and the tick did not wait (group_wait) or
	// found no slot within its catch-up window.
	SkipGroupFull = "group_full"
)

// Node is a live node's announcement. The JSON names are the contract.
type Node struct {
	NodeID     string    `json:"node_id"`
	Version    string    `json:"version"`
	StartedAt  time.Time `json:"started_at"`
	LastSeen   time.Time `json:"last_seen"` // set by the store (its clock) on Announce
	ConfigHash string    `json:"config_hash"`
	// Tags are the node's tags (config tags, run --tag): a schedule with
	// nodes runs on the nodes that have them all. Nodes of earlier
	// versions announce none.
	Tags []string `json:"tags,omitempty"`
	// Schedules maps each schedule id the node runs to the hash of its
	// effective definition (its next fire times included), so drift can
	// name the schedules that differ.
	Schedules map[string]string `json:"-"`
	// Fields maps the ids of the schedules the node saw in drift to their
	// field hashes (DriftFields' order, FieldHashLen hex digits each), so
	// drift can name the fields that differ. Only those: at 100,000
	// schedules all of them would add megabytes to every announcement.
	// Nodes of earlier versions announce none.
	Fields map[string]string `json:"-"`
	// Ready is the node's own readiness (its /readyz) when it announced.
	Ready bool `json:"-"`
	// ClockOffset is the node's clock minus the backend's, as the node
	// last measured it; nil when it has not measured one.
	ClockOffset *time.Duration `json:"-"`
	// Running lists the runs going on the node when it announced (a node
	// announces again soon after one starts or ends), oldest first.
	Running []Running `json:"-"`
}

// OffsetNanos and OffsetFromNanos are how backends store a node's clock
// offset: nanoseconds, nil when the node has not measured one.
func OffsetNanos(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	ns := int64(*d)
	return &ns
}

// OffsetFromNanos reads what OffsetNanos stored.
func OffsetFromNanos(ns *int64) *time.Duration {
	if ns == nil {
		return nil
	}
	d := time.Duration(*ns)
	return &d
}

// Running is a run going on a node, as the node's announcement tells:
// what `status` shows as running now, and what `stop` stops.
type Running struct {
	Schedule  string    `json:"schedule"`
	Tick      time.Time `json:"tick"`
	RunID     string    `json:"run_id"`
	StartedAt time.Time `json:"started_at"` // the first attempt's start
	Attempt   int       `json:"attempt"`    // 1 for the first attempt
}

// Request is a manual run asked of the cluster: a trigger (run once now)
// or one tick of a backfill. Requests of a schedule form a queue, oldest
// first; a node takes the head under the schedule's lock.
type Request struct {
	ID       string `json:"id"`       // random; becomes the run id
	Schedule string `json:"schedule"` // the schedule id
	// Tick is the BEXT_TICK_TIME of the run: the time a trigger was asked
	// for, or the backfilled tick.
	Tick     time.Time `json:"tick"`
	Backfill bool      `json:"backfill"`
	By       string    `json:"by"` // who asked (CLI user@host, "api")
	At       time.Time `json:"at"` // when it was asked
}

// Taken is the answer of TakeRequest.
type Taken struct {
	// Request is the queue's head, nil when the queue is empty.
	Request *Request
	// Handle is the schedule's lock, taken for the request (nil when the
	// queue is empty or the lock is held: then Contended tells).
	Handle    *locking.Handle
	Contended bool
}

// TakeReq is one TakeRequest: schedule's lock for TTL and the head of its
// queue, taken by Node.
type TakeReq struct {
	Schedule string
	Node     string
	TTL      time.Duration
	// Token names the take so that it can be resent (see TakeRequest): a
	// caller draws one per take (locking.NewToken) and sends it again,
	// unchanged, on an answer that is not definite. It also becomes the
	// lock's token. Empty: the backend draws one, and the take cannot be
	// resent.
	Token string
}

// TakeKeep is how long a backend keeps the record of a take answered with
// a request, for its resends: twice its TTL. (A trigger not heard back is
// kept longer, until it goes back to its queue: see TakeRequest.)
func TakeKeep(ttl time.Duration) time.Duration { return 2 * ttl }

// Store is the cluster state contract. Implementations are safe for
// concurrent use, and use the key namespace of their lock backend (Redis
// key_prefix, Postgres namespace): two clusters sharing one server never
// see each other's state.
type Store interface {
	Control

	// RecordRuns appends runs to their schedules' histories, keeping the
	// newest keep of each (older ones are trimmed, not necessarily at
	// once, but a history never exceeds 2×keep). Fields over their bounds
	// are cut to MaxErrorLen and MaxOutputTail. A run recorded unstarted
	// (Attempts 0: a manual run given back before it started, recorded
	// lock_lost under its request's id; or the provisional record of a run
	// that started, Result ResultRunning) is replaced by the real run of
	// the same schedule and RunID (Attempts > 0) once that one is recorded,
	// by any node, in any batch; never the other way: an unstarted record
	// of a run already recorded is not stored. (A provisional record has
	// its final's StartedAt: a backend may look for the final among the
	// runs that started then only.)
	RecordRuns(ctx context.Context, runs []Run, keep int) error
	// Runs returns up to limit runs of schedule, newest first (by
	// StartedAt).
	Runs(ctx context.Context, schedule string, limit int) ([]Run, error)
	// LastRuns returns the newest run of each of schedules that has one.
	LastRuns(ctx context.Context, schedules []string) (map[string]Run, error)

	// RecordSkips adds skips to their schedules' skip records: one per
	// schedule and tick, the first recorded kept (the same tick recorded
	// again, by any node, in any batch, is dropped: several nodes may see
	// one decision). Each schedule keeps its newest keep skips by Tick,
	// apart from its runs (a paused schedule does not push its runs out),
	// trimmed as RecordRuns trims (never more than 2×keep). Notes are cut
	// as run errors are (BoundSkip).
	RecordSkips(ctx context.Context, skips []Skip, keep int) error
	// Skips returns up to limit skips of schedule, newest tick first.
	Skips(ctx context.Context, schedule string, limit int) ([]Skip, error)

	// Announce records n as live until ttl from now (the store's clock),
	// setting its LastSeen. A store may keep n.Schedules itself rather
	// than a copy (the in-process memory backend does): the caller must
	// not change the map afterwards, and the maps Nodes returns are read
	// only.
	Announce(ctx context.Context, n Node, ttl time.Duration) error
	// Nodes returns the live nodes, sorted by NodeID.
	Nodes(ctx context.Context) ([]Node, error)
	// Leave removes a node's announcement (a graceful stop).
	Leave(ctx context.Context, nodeID string) error

	// Enqueue adds requests to their schedules' queues, in order. A
	// backfill is refused (ErrBusy) while the schedule has a backfill
	// queued. It returns once the requests are stored.
	Enqueue(ctx context.Context, reqs []Request) error
	// Queued returns the ids of the schedules that have requests queued:
	// what a node polls to find work (one cheap call for the cluster).
	Queued(ctx context.Context) ([]string, error)
	// Requests returns a schedule's queue, oldest first.
	Requests(ctx context.Context, schedule string) ([]Request, error)
	// TakeRequest takes, in one atomic step, the schedule's lock (key =
	// the schedule id, as try-lock for ttl; no tick mark is touched) and
	// the head of its queue, and records that node accepted it (see
	// Accepted). A trigger is removed from the queue in that same step, so
	// two nodes never both run it; a backfill tick stays at the head until
	// Done, so a node that dies mid-backfill leaves it to another once its
	// lock is free. An empty queue takes no lock.
	//
	// A take is resendable by its Token (TakeReq): a caller whose answer
	// was not definite (a timeout, a broken connection: the backend may
	// have applied it, and a trigger taken but never answered would run
	// nowhere) sends the same take again, same Token. The backend keeps
	// what it answered a take with a request (the request and the lock
	// taken for it) under its Token for at least 2×TTL (TakeKeep; Postgres
	// 2×max(TTL, MaxLease), as its locks outlive a lost session that
	// long), and answers a take
	// carrying a Token it has a record of from that record:
	//
	//   - the lock is still the record's: the same Request and a Handle
	//     with the same token and fence, the lock extended (TTL from now)
	//     as a renewal would;
	//   - a trigger whose lock ended, the lock free: the lock is taken
	//     again (a new fence) for the same Request;
	//   - a trigger whose lock ended, the lock held by another: the trigger
	//     goes back to the head of its queue, the record is dropped, and
	//     the answer is Contended with it as Request (whoever takes it
	//     next runs it: never lost, never run twice);
	//   - a backfill whose lock ended: decided as a fresh take (the tick
	//     stayed queued until Done);
	//   - Postgres: the lock still held by the session of the take whose
	//     reply was lost, the server not having dropped it yet: an error
	//     wrapping locking.ErrResendHeld, not definite: resend.
	//
	// A Token is resent only while its take has no definite answer. Once
	// the taker of a trigger's take was heard (it renewed or released the
	// take's lock: see below), a take carrying its Token is a late copy of
	// the answered take (or the Token reused): while the backend keeps the
	// record, it takes nothing (the zero Taken, a definite answer: no
	// lock, nothing put back) and leaves the record as it is, for the
	// take's GiveBack. Answered from the record, it would take the trigger
	// that ran again, or put it back; decided as a fresh take, it would
	// replace the record with another trigger, which that GiveBack would
	// then put back instead of its own. (A copy arriving before its
	// taker's renewal is indistinguishable from a resend and answered as
	// one: the taker's own lock, or its trigger still unheard.) Another
	// Token (or none) is a fresh take, decided as above; so is a Token past
	// its record's keep.
	//
	// A trigger taken with a Token whose taker is never heard from again
	// (every reply and resend lost, the taker gone or given up) is not
	// lost with its record: the backend keeps it until the taker renews
	// the take's lock or releases it while it is held (its word that it
	// heard the take: the trigger is its own from then on, run or given
	// back by GiveBack), and a take that finds the schedule's lock free first puts
	// every trigger still unheard back at the head of its queue (the
	// oldest take first; Postgres: at its own place in the queue) with its
	// record dropped, the schedule listed by Queued meanwhile. So a taker
	// must renew the lock once, successfully, before it starts the run
	// (the scheduler's RunManual does): a run that started is never
	// requeued, even when its node then dies. A lock that ended unheard
	// (expired, its session gone, released by Close) is no word. A taker
	// that heard the take but will not start its run (the confirming
	// renewal failed, even with no answer; the run refused) gives it back
	// (GiveBack) rather than releasing the lock: a renewal applied whose
	// reply was lost, or a release, is the taker's word all the same, and
	// the trigger would then run nowhere.
	TakeRequest(ctx context.Context, req TakeReq) (Taken, error)
	// GiveBack ends the take h (a handle TakeRequest returned, taken with a
	// Token) whose run will not start, in one atomic step: while the
	// backend has the take's record (heard or not: a renewal or release
	// keeps it, for this, at least TakeKeep from the take), a trigger goes
	// back to the head of its queue (Postgres: at its own place) and the
	// record is dropped; the lock is released if h still holds it. With no
	// record (given back already, put back by the backend as never heard,
	// or past its keep) it only releases the lock if h holds it. So it is
	// idempotent: a caller whose answer was not definite sends it again,
	// until answered or the keep has passed, and a trigger is put back at
	// most once per take; one the backend put back, and another node took
	// since, is not put back again. A backfill tick stays queued until
	// Done: for one, GiveBack is a release. Only a taker that did not start
	// the run may call it: a run that started, given back, would run twice.
	GiveBack(ctx context.Context, h *locking.Handle) error
	// Done removes a backfill request from its queue once its run ended
	// (whatever the result), wherever it is in the queue: a trigger put
	// back at the head while it ran must not keep it queued. It is a no-op
	// for a trigger, and for a request no longer queued.
	Done(ctx context.Context, req Request) error
	// Accepted reports which node took request id (empty while nobody
	// has): how `trigger` knows its request was accepted. Kept for a day.
	Accepted(ctx context.Context, schedule, id string) (node string, err error)
	// Held reports whether the schedule's own lock (key = the schedule id)
	// is held now, by anyone: `trigger` refuses at once (exit 75, HTTP
	// 409) when a run of a schedule with overlap = "skip" holds it.
	Held(ctx context.Context, schedule string) (bool, error)
}

// Errors of the contract.
var (
	// ErrBusy: a backfill is already queued for the schedule.
	ErrBusy = errors.New("cluster: a backfill is already queued for this schedule")
	// ErrInvalid: bad input (empty schedule id, a request without an id).
	ErrInvalid = errors.New("cluster: invalid argument")
)

// CheckRun validates a run to record; backends call it first.
func CheckRun(r Run) error {
	if err := locking.CheckKey(r.Schedule); err != nil {
		return fmt.Errorf("%w: run of schedule %q: %w", ErrInvalid, r.Schedule, err)
	}
	if r.RunID == "" {
		return fmt.Errorf("%w: run of %q has no run id", ErrInvalid, r.Schedule)
	}
	switch r.Anomaly {
	case "", AnomalyOverrun, AnomalyTooFast:
	default:
		return fmt.Errorf("%w: run %q of %q: unknown anomaly %q (want %q, %q or none)",
			ErrInvalid, r.RunID, r.Schedule, r.Anomaly, AnomalyOverrun, AnomalyTooFast)
	}
	return nil
}

// Bound cuts a run's free-text fields to their limits: the error to its
// first line, at most MaxErrorLen bytes; the output to its last
// MaxOutputTail bytes at most. Both come out as valid UTF-8 without NUL
// bytes (invalid bytes and NUL become U+FFFD, a cut never splits a
// character): Postgres text refuses anything else, and JSON would mangle it
// anyway. Backends call it before storing.
func Bound(r Run) Run {
	if i := strings.IndexAny(r.Error, "\r\n"); i >= 0 {
		r.Error = r.Error[:i]
	}
	r.Error = cleanText(r.Error)
	if len(r.Error) > MaxErrorLen {
		cut := MaxErrorLen
		for cut > 0 && !utf8.RuneStart(r.Error[cut]) {
			cut--
		}
		r.Error = r.Error[:cut]
	}
	r.OutputTail = cleanText(r.OutputTail)
	if n := len(r.OutputTail); n > MaxOutputTail {
		cut := n - MaxOutputTail
		for cut < n && !utf8.RuneStart(r.OutputTail[cut]) {
			cut++
		}
		r.OutputTail = r.OutputTail[cut:]
	}
	// By comes from whoever wrote a request into the backend: bounded as
	// an error line is, so a history row stays small.
	if r.By != "" {
		r.By = Bound(Run{Error: r.By}).Error
	}
	return r
}

// BoundSkip cuts a skip's note as Bound cuts a run's error, and its
// reason and node to MaxErrorLen: backends call it before storing.
func BoundSkip(k Skip) Skip {
	k.Note = Bound(Run{Error: k.Note}).Error
	k.Reason = Bound(Run{Error: k.Reason}).Error
	k.Node = Bound(Run{Error: k.Node}).Error
	return k
}

// cleanText makes s valid UTF-8 without NUL bytes.
func cleanText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
