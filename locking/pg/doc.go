// Package pg is the Postgres lock backend: session-level advisory locks
// (pg_try_advisory_lock) on a 64-bit id derived from a namespace and the
// whole key, with a fencing token per key kept in a table.
//
// # Sessions
//
// An advisory lock lives as long as the session that took it, and one
// session holds any number of them. A Locker keeps at most
// Options.MaxSessions connections, shared by every call and every held lock:
// a call takes the least busy session (or connects a new one while fewer
// are open), one statement at a time per session (a pgx.Conn is not safe
// for concurrent use), and a lock stays on the session that took it, where
// it is renewed and released. MaxSessions bounds connections, not locks held.
// Renewals of one session's locks that come at once share one statement,
// which lists the locks the backend holds (pg_locks). A statement on a
// shared session is not cut short by its caller's cancellation (pgx would
// break the connection, and with it the other callers' locks): the caller's
// context is checked before it starts, OpTimeout bounds it.
//
// A session that fails to answer (a broken connection, a timeout) is given
// up: exactly the locks it held are lost, each reported to its holder at
// its next Renew or Release, at once, and none is taken again by itself.
// It is abandoned, not closed: closing it would make Postgres free all
// its locks at once, while each other holder multiplexed on it counts on
// its lock until its last successful call plus MaxLease and is told only
// at its next call, so another node could take a key whose holder still
// runs. pgx ends a connection by itself when a statement on it fails to
// complete (a cancel request, Terminate, close); every socket this
// package dials stops that for a lock session (gate.go): once a statement
// failed nothing more is sent on it (Terminate included) and pgx's close is
// ignored. The Locker closes the socket MaxLease after giving the session
// up (at once if it held no lock; at Close in any case). Meanwhile the
// server keeps the session and its locks (a lock taken by the statement
// that failed included: it is freed with the rest), and the abandoned
// sockets are open beyond MaxSessions. A server-side statement_timeout
// would not do instead: a stalled network, not a slow statement, is the
// usual cause, and pgx cannot resume a connection after a timed-out read.
//
// Advisory locks have no TTL. The handle's TTL is only the lease the caller
// plans by; the lock ends when it is released or when its session dies (the
// holder crashed, the network dropped, an operator ran pg_terminate_backend).
// Renew proves that the session is alive and still holds the lock. Every
// session gets TCP keepalives and a TCP user timeout on both ends (on
// Postgres's side with SET after connecting), so a dead peer is noticed
// within a few multiples of Options.OpTimeout and Postgres frees a vanished
// holder's locks by itself. MaxLease (locking.LeaseBounder) is the soonest
// that can happen after a holder's last answered call: with the default
// OpTimeout of 5s, 8s (idle 5s + 3 probes 1s apart; the user timeout is
// 10s). The scheduler renews within it. Sessions also SET
// idle_session_timeout = 0, so a server-wide idle timeout cannot end a
// lock between two renewals.
//
// Renew and Release report a lock they could not confirm as lost
// (locking.ErrLockLost); when Postgres did not answer at all (a broken
// connection, a timeout) the error also wraps locking.ErrUnavailable, so
// an outage is seen as one. A statement Postgres refuses to the configured
// role (insufficient_privilege, SQLSTATE 42501; class 28 at connection)
// wraps locking.ErrPermission instead of ErrUnavailable. Close honours its context's deadline: when it
// passes, the remaining sessions are closed without waiting for answers.
//
// Advisory locks are re-entrant per session and sessions are reused, so the
// Locker remembers the lock ids it holds: a second TryLock for a key this
// Locker already holds (or is acquiring) answers "contended" without asking
// Postgres. Two keys whose ids collide (a 2^-64 chance per pair) only
// contend with each other; they can never both be held.
//
// # Fencing tokens, tick marks and pauses
//
// After winning the advisory lock, the same statement increments the key's
// row in bext_lock_fences and returns it, so each TryLock is one round trip
// and each Release is one. The table is created on first use (columns added
// by later releases are added in place); an operator who prefers to create
// it (the scheduler's role then needs no CREATE privilege) runs:
//
//	CREATE TABLE IF NOT EXISTS bext_lock_fences (
//	    namespace   text        NOT NULL,
//	    key         text        NOT NULL,
//	    fence       bigint      NOT NULL,
//	    holder      text,
//	    acquired_at timestamptz,
//	    tick_mark   bigint,       -- µs since the epoch
//	    tick_token  text,         -- read by nodes of earlier releases
//	    paused      boolean     NOT NULL DEFAULT false,
//	    pause_until timestamptz,
//	    pause_note  text,
//	    tick_grants jsonb,        -- grants a resend may come for
//	    token_tick  bigint,       -- T (µs) of the grant tick_token is from
//	    PRIMARY KEY (namespace, key)
//	);
//
// A fence is the larger of the key's last fence + 1 and the database
// clock in microseconds, so fences strictly increase per key, and keep doing
// so when a crash forgets the last fence writes: plain lock sessions commit
// them with synchronous_commit=off (waiting for fsync was most of a
// TryLock's cost and bought nothing, since the clock floor already makes a
// forgotten fence harmless). This assumes the database clock does not step
// back by more than the time between a lost write and the restart. A URL
// that sets synchronous_commit keeps its own value.
//
// TryLockTick (locking.TickLocker) is one round trip too: two statements
// in one transaction (see below). The first locks the key's row (creating
// it when missing), so the second decides on the row's latest committed
// version: it reads the key's mark and pause flag, takes the advisory lock
// only when the decision calls for it, raises the mark and draws the
// fence, deciding as locking.DecideTick on the database clock
// (clock_timestamp()). A mark or pause committed before the row was locked
// wins. That transaction, and InitMarks and SetPause, commit with
// synchronous_commit = on whatever the session says (set_config local to
// their own transaction): a mark a run was granted on must survive a crash.
// The row also keeps each grant's T, fence, token and until (tick_grants),
// so a call resent after a lost reply (same token, same T) is answered
// granted with its own fence, whatever later ticks were decided paused or
// missed meanwhile, and its until extended (once the first call's session
// is gone; until then with an error wrapping locking.ErrResendHeld). A
// resend is decided as any other request once its grant was released
// (Release forgets it, on another session when the grant's own died), its
// until passed, or, for a schedule lock, another acquisition of the key
// drew a later fence. A resend (locking.TickRequest.Resend) answered
// contended or done, decided anew, leaves an entry under 'T/token' too, so
// that a late copy of an earlier attempt is answered the same and changes
// nothing. A per-tick lock (overlap = allow) is taken under
// locking.TickLockKey, the mark staying the schedule's; a later tick of
// the schedule may be granted while an earlier one runs, and each keeps
// its own entry (see tryLockTicksSQL).
//
// A try-lock-tick that raised a mark (granted, paused, missed) tells it,
// in the same transaction, with pg_notify on the cluster's channel (named
// from the table's schema and the namespace); WatchTicks
// (locking.TickWatcher) LISTENs on one connection of its own, not a lock
// session, and connects again after a drop. Behind a session-pooling
// PgBouncer that connection keeps its server connection as a lock session
// does; a transaction pooler is refused (see below).
//
// A try-lock-tick is two statements over arrays of requests, sent in one
// round trip and one transaction: the first locks the requests' rows (in
// key order), the second decides each request on them, takes the advisory
// locks of the grants and raises the marks. TryLockTicks (the scheduler's
// batcher) sends a whole burst that way, one commit for all of it;
// TryLockTick is a batch of one. InitMarks, called when a scheduler
// starts, opens the sessions a burst uses and prepares these statements
// on them.
//
// Every session runs with jit off and generic plans (plan_cache_mode):
// the statements are a few key lookups, and on a table of a few hundred
// thousand rows the planner's estimates made the tick statement compile
// for seconds (JIT) or be planned afresh on every execution.
//
// The table is found through the session's search_path (set it in the URL,
// e.g. options=-csearch_path%3Dbext, to keep it out of public).
//
// # The cluster tables
//
// The cluster state (cluster.Store: runs, skips, nodes, manual-run queues
// and takes) lives in bext_runs, bext_run_counts, bext_skips, bext_nodes,
// bext_requests, bext_accepted, bext_taken and bext_taken_heard, created on
// first use with CREATE TABLE IF NOT EXISTS (see createClusterSQL for their
// columns); a role without CREATE works once they all exist.
// bext_taken_heard, added with cluster.Store.GiveBack, and bext_skips,
// added with cluster.Store.RecordSkips, are tables of their own, so
// upgrading to them needs the CREATE right once. bext_runs' anomaly and
// run_by columns (a run's Anomaly and By) came after the table: a node
// adds them under the creation's lock where its role may ALTER bext_runs,
// and a role that may not works once an operator ran
//
//	ALTER TABLE bext_runs ADD COLUMN IF NOT EXISTS anomaly text NOT NULL DEFAULT '',
//	    ADD COLUMN IF NOT EXISTS run_by text NOT NULL DEFAULT '';
//
// (the defaults let nodes of earlier versions, which name only the columns
// they know, keep inserting runs). For the new tables an operator runs:
//
//	CREATE TABLE IF NOT EXISTS bext_skips (
//	    namespace text   NOT NULL,
//	    schedule  text   NOT NULL,
//	    tick_ns   bigint NOT NULL,
//	    node      text   NOT NULL,
//	    reason    text   NOT NULL,
//	    note      text   NOT NULL,
//	    at_ns     bigint NOT NULL,
//	    PRIMARY KEY (namespace, schedule, tick_ns)
//	);
//
//	CREATE TABLE IF NOT EXISTS bext_taken_heard (
//	    namespace text        NOT NULL,
//	    schedule  text        NOT NULL,
//	    token     text        NOT NULL,
//	    seq       bigint      NOT NULL,
//	    id        text        NOT NULL,
//	    request   jsonb       NOT NULL,
//	    fence     bigint      NOT NULL,
//	    until     timestamptz NOT NULL,
//	    PRIMARY KEY (namespace, schedule, token)
//	);
//
// Nodes of earlier versions run beside these on the same tables: they
// never read bext_skips (the skips they decide are not recorded) nor
// bext_taken_heard, and a row of bext_taken means a take not
// heard back for every version. (A build of this branch between GiveBack
// and this table marked heard takes in a bext_taken column, heard; rows it
// marked would be read as not heard here: do not run it beside this one.)
//
// # Connection poolers
//
// Behind a transaction-pooling PgBouncer consecutive transactions of one
// client may run on different server connections, and one server
// connection serves several clients in turn, so session locks silently
// stop excluding anything (two clients of a pool of one both "hold" a key,
// by re-entrancy). Every new session is checked:
//
//   - Postgres's startup BackendKeyData names the session's backend; a
//     pooler sends its own (PgBouncer: a random one). A pid there equal to
//     pg_backend_pid() is Postgres itself, and nothing more is asked.
//   - Otherwise a pooler is in between, and it is tested: one client takes
//     a session lock and disconnects, a second looks for it. A session
//     pool resets the server connection (server_reset_query, DISCARD ALL by
//     default) before anyone else gets it, so the lock is gone at once; a
//     transaction or statement pool (or a session pool without a reset
//     query) leaves it held. The verdict is kept for a minute, so a session
//     pool costs two extra connections a minute, not per session.
//   - Every statement checks it ran on the session's backend, and pgx's
//     statement-cache errors (a prepared statement of another client
//     found on the server connection) are read as a pooler.
//
// A transaction pooler is refused with ErrTransactionPooler: TryLock,
// TryLockTick, Ping (so readiness fails) and the rest. A URL naming
// PgBouncer's admin console is refused too.
//
// Session-mode PgBouncer is supported: each of our sessions owns a server
// connection for its whole life, and the session settings are applied with
// SET after connecting, never as startup parameters (PgBouncer refuses
// those it does not know). Two things change behind it, which operators
// must set in pgbouncer.ini: the keepalive and user-timeout settings this
// package applies govern only the PgBouncer-to-Postgres socket, so a dead
// holder's lock lasts until PgBouncer notices its client is gone (set
// tcp_keepalive, tcp_keepidle, tcp_keepintvl, tcp_keepcnt and
// tcp_user_timeout to match; with the OS defaults it can be hours), and
// MaxLease assumes PgBouncer drops a silent client no sooner than Postgres
// would (keep client_idle_timeout off or above the renewal interval).
// default_pool_size must cover every lock held at once, plus one per
// node: a session pool that is full makes new sessions wait.
package pg
