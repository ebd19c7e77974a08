// Package pg is the Postgres lock backend: session-level advisory locks
// (pg_try_advisory_lock) on a 64-bit id derived from a namespace and the
// whole key, with a fencing token per key kept in a table.
//
// # Sessions
//
// An advisory lock lives as long as the session that took it, so a held lock
// pins its own connection. A Locker keeps at most Options.MaxSessions
// connections: those not pinned by a lock wait on an idle list and serve the
// next TryLock, Ping or List. When every session is pinned, TryLock answers at
// once with an error wrapping ErrNoSession (and locking.ErrUnavailable)
// instead of waiting: the lock might be free, but this node cannot ask.
//
// Advisory locks have no TTL. The handle's TTL is only the lease the caller
// plans by; the lock ends when it is released or when its session dies (the
// holder crashed, the network dropped, an operator ran pg_terminate_backend).
// Renew proves that the session is alive and still holds the lock. Every
// session is opened with TCP keepalives and a TCP user timeout on both ends,
// so a dead peer is noticed within a few multiples of Options.OpTimeout and
// Postgres frees a vanished holder's locks by itself.
//
// Advisory locks are re-entrant per session and sessions are reused, so the
// Locker remembers the lock ids it holds: a second TryLock for a key this
// Locker already holds (or is acquiring) answers "contended" without asking
// Postgres. Two keys whose ids collide (a 2^-64 chance per pair) only
// contend with each other; they can never both be held.
//
// # Fencing tokens
//
// After winning the advisory lock, the same statement increments the key's
// row in bext_lock_fences and returns it, so each TryLock is one round trip
// and each Release is one. The table is created on first use; an operator
// who prefers to create it (the scheduler's role then needs no CREATE
// privilege) runs:
//
//	CREATE TABLE IF NOT EXISTS bext_lock_fences (
//	    namespace   text        NOT NULL,
//	    key         text        NOT NULL,
//	    fence       bigint      NOT NULL,
//	    holder      text,
//	    acquired_at timestamptz,
//	    claimed_until timestamptz,
//	    PRIMARY KEY (namespace, key)
//	);
//
// A fence is the larger of the key's last fence + 1 and the database
// clock in microseconds, so fences strictly increase per key, and keep doing
// so when a crash forgets the last fence writes: lock sessions commit them
// with synchronous_commit=off (waiting for fsync was most of a TryLock's
// cost and bought nothing, since the clock floor already makes a forgotten
// fence harmless). This assumes the database clock does not step back by
// more than the time between a lost write and the restart. A URL that sets
// synchronous_commit keeps its own value.
//
// The table is found through the session's search_path (set it in the URL,
// e.g. options=-csearch_path%3Dbext, to keep it out of public).
//
// # Connection poolers
//
// Behind a transaction-pooling PgBouncer every statement may run on another
// server connection, so session locks silently stop excluding anything. Each
// new session is probed (a lock taken by one statement must be seen on the
// same backend by the next), and every TryLock and Renew checks that the
// backend pid has not changed; on failure the error wraps
// ErrTransactionPooler. A session-pooling pool is fine. The probe cannot
// catch a transaction pooler that happens to hand the same server connection
// back every time (an idle pool with one client); the per-statement pid check
// catches it as soon as the pool is shared.
package pg
