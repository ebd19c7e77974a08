package pg

import (
	"crypto/sha256"
	"encoding/binary"
)

// lockID derives the 64-bit advisory lock id of key in namespace: the first
// 8 bytes (big-endian) of SHA-256(namespace, NUL, key). hashtext would give
// only 32 bits; 64 make collisions (which only add contention) negligible.
// The NUL keeps ("a", "bc") and ("ab", "c") apart. idExpr computes the same.
func lockID(namespace, key string) int64 {
	h := sha256.New()
	h.Write([]byte(namespace))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return int64(binary.BigEndian.Uint64(h.Sum(sum[:0])[:8]))
}

// splitID gives the (classid, objid) pair under which pg_locks shows a
// bigint advisory lock (with objsubid 1): the high and low 32 bits.
func splitID(id int64) (hi, lo int64) {
	u := uint64(id)
	return int64(u >> 32), int64(u & 0xffffffff)
}

// probeClass is the first half of the two-int advisory keys this package
// uses for itself (objsubid 2, a space apart from the bigint keys of locks):
// (probeClass, backend pid) for the pooler probe, (probeClass, 0) to
// serialise table creation. It spells "bext".
const probeClass = 0x62657874

// leakClass is the first half of the two-int advisory key of the pooler
// leak test (session.go): (leakClass, a random nonce). It spells "bexu".
const leakClass = 0x62657875

const (
	// tableExistsSQL avoids CREATE TABLE when the table is there with every
	// column, so a role without CREATE privilege works once an operator made
	// it. It checks the newest column.
	tableExistsSQL = `SELECT to_regclass('bext_lock_fences') IS NOT NULL AND EXISTS (
  SELECT 1 FROM pg_attribute
  WHERE attrelid = to_regclass('bext_lock_fences') AND attname = 'pause_note' AND NOT attisdropped)`

	// tableSchemaSQL names the schema of the bext_lock_fences the
	// session's search_path finds: with the namespace, it names the
	// cluster's notification channel (watch.go).
	tableSchemaSQL = `SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass('bext_lock_fences')`

	// createTableSQL runs under a transaction-level advisory lock so two
	// nodes creating the table at once do not race into a unique_violation
	// on pg_type. It is sent as one simple-protocol message. Columns added
	// after the first release are added with ADD COLUMN IF NOT EXISTS, so an
	// older table is brought up to date in place.
	createTableSQL = `BEGIN;
SELECT pg_advisory_xact_lock(1650817140, 0);
CREATE TABLE IF NOT EXISTS bext_lock_fences (
    namespace   text        NOT NULL,
    key         text        NOT NULL,
    fence       bigint      NOT NULL,
    holder      text,
    acquired_at timestamptz,
    PRIMARY KEY (namespace, key)
);
ALTER TABLE bext_lock_fences ADD COLUMN IF NOT EXISTS tick_mark bigint;
ALTER TABLE bext_lock_fences ADD COLUMN IF NOT EXISTS tick_token text;
ALTER TABLE bext_lock_fences ADD COLUMN IF NOT EXISTS paused boolean NOT NULL DEFAULT false;
ALTER TABLE bext_lock_fences ADD COLUMN IF NOT EXISTS pause_until timestamptz;
ALTER TABLE bext_lock_fences ADD COLUMN IF NOT EXISTS pause_note text;
COMMIT;`

	// tryLockSQL takes the advisory lock and, only when it won, bumps the
	// key's fencing token, in one round trip. The CTE l calls a volatile
	// function, so Postgres evaluates it exactly once, before the INSERT that
	// reads it. pg_backend_pid() lets the caller check the statement ran on
	// the session's own backend (a transaction pooler would move it).
	//
	// A fence is at least the database clock in microseconds, and above the
	// last one: so it stays strictly increasing even when a crash forgets
	// the last fence writes (sessions commit them asynchronously, see
	// doc.go), as long as the database clock does not step back.
	//
	// What the row write costs, and why it stays. On one held connection,
	// the lock and unlock alone take 308 µs and with this upsert 422 µs
	// (BenchmarkFenceWrite, medians of 3 × 3,000 interleaved ops on a
	// loaded 2-core machine): about a third more, all on the server (a
	// heap update, its WAL record, a commit without waiting for the flush);
	// the client sends the same one round trip. What was tried:
	//   - HOT: a key's updates are heap-only (no index entry) once its
	//     page has room: 100% in steady state at fillfactor 100 and at 70
	//     (same benchmark; 94 to 97% on the shared test database, whose
	//     pages are crowded by many namespaces and dead rows). Rows created
	//     together and then updated in one transaction (InitMarks at
	//     start, then a burst's TryLockTicks) are the exception: the first
	//     update of 2,000 such rows was 0% HOT at fillfactor 100, 6% at 90
	//     and 24% at 70 (psql), with no difference in time measurable here
	//     (20,000 updates: 1.47 s and 1.97 s at 100, 1.29 s and 2.05 s at
	//     70). fillfactor stays at the default: it would cost space on every
	//     page for a gain this machine cannot see.
	//   - Batching a burst's marks (TryLockTicks): one transaction, one
	//     WAL flush for many ticks. BenchmarkMarkBatch: 178 to 214 µs a
	//     tick batched against 722 µs to 1.2 ms one statement each, and
	//     435 to 443 against 483 to 523 WAL bytes a tick. Plain TryLocks
	//     are not batched: each caller needs its answer at once, and their
	//     commit does not wait for the flush anyway.
	//   - Not writing the fence (or an UNLOGGED table, which a crash or a
	//     promoted replica empties) would lose the guarantee only partly,
	//     since a fence is floored at the clock; but the row also carries
	//     the mark, the pause flag and the grant's token, which must be
	//     durable, and the holder that `locks` shows. So the write stays.
	// Much larger costs came from elsewhere and are gone: JIT compiling
	// the tick statement (seconds) and re-planning it on each execution
	// (2 to 9 ms), see configureSessions.
	tryLockSQL = `WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock($1::bigint) AS ok),
c AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us),
f AS (
  INSERT INTO bext_lock_fences AS t (namespace, key, fence, holder, acquired_at)
  SELECT $2::text, $3::text, greatest(1, c.us), $4::text, now() FROM l, c WHERE l.ok
  ON CONFLICT (namespace, key) DO UPDATE
    SET fence = greatest(t.fence + 1, excluded.fence), holder = excluded.holder, acquired_at = excluded.acquired_at
  RETURNING t.fence)
SELECT l.ok, (SELECT fence FROM f), pg_backend_pid() FROM l`

	// tryLockTickSQL is try-lock-tick in one statement and one round trip,
	// deciding as locking.DecideTick does, on the database clock.
	//
	//	$1 lock id  $2 namespace  $3 key (the mark's row)  $4 holder
	//	$5 T, $6 floor, $7 max skew, $8 window (microseconds)  $9 token
	//	$10 the channel raised marks are told on ('' for none)
	//
	// The statement's snapshot (d) decides whether to try the lock at all;
	// a mark at or past T there is final, as marks only rise. The snapshot
	// may be stale, so the upsert re-decides on the latest row version,
	// which ON CONFLICT DO UPDATE locks and sees under READ COMMITTED even
	// when the snapshot does not: a mark raised, or a pause set, by a
	// statement that committed meanwhile wins. The upsert draws the fence
	// only when it stores this call's token, which tells the caller it won.
	// The CTE un gives the advisory lock back when it was taken but not
	// granted; it reads u, so it runs after the upsert.
	//
	// The mark must survive a crash once a run was granted on it, so the
	// statement commits with synchronous_commit = on whatever the session
	// says (set_config's is_local: this statement's own transaction, read
	// at its commit). It returns the setting in force as a check.
	//
	// A resent call (the row carries this token and T as its mark) takes
	// the lock again if it is free and answers with the fence it drew;
	// resend_held when the lock is still held (by the first call's session,
	// which the server has not dropped yet).
	//
	// A mark this statement raised to T (granted, paused, missed; not a
	// resent call's, which its first call told) is told to the cluster's
	// listeners (locking.TickWatcher, watch.go): the CTE n sends
	// pg_notify($10, 'T key') on the cluster's channel, '' for none. It is
	// part of the statement's transaction, so it is delivered only once
	// the raised mark committed (durably, as above), and it adds nothing
	// to the round trip: the notifying session does not listen, and the
	// reply is the same single row. A payload is at most ~1,050 bytes
	// (MaxKeyLen 1024), far below NOTIFY's 8,000.
	//
	// What it costs: a notifying commit takes Postgres's one lock on the
	// notification queue (PreCommit_Notify), held until the commit
	// record is flushed, so commits that notify are serialised with each
	// other and lose group commit. Only a raised mark notifies, once per
	// tick cluster-wide; TryLockTicks (batch.go) raises a burst's marks in
	// one transaction, so a burst pays it once per batch.
	tryLockTickSQL = `WITH c AS MATERIALIZED (
  SELECT clock_timestamp() AS ts, set_config('synchronous_commit', 'on', true) AS sc),
s AS MATERIALIZED (
  SELECT c.ts, (extract(epoch FROM c.ts) * 1000000)::bigint AS now_us,
    r.tick_mark AS mark, r.tick_token AS tok, r.fence AS fence,
    coalesce(r.paused AND (r.pause_until IS NULL OR c.ts < r.pause_until), false) AS paused
  FROM c LEFT JOIN bext_lock_fences r ON r.namespace = $2::text AND r.key = $3::text),
e AS MATERIALIZED (
  SELECT s.*, greatest(coalesce(s.mark, s.now_us - $7::bigint), least($6::bigint, s.now_us)) AS eff FROM s),
d AS MATERIALIZED (
  SELECT e.*, CASE
      WHEN e.tok = $9::text AND e.mark = $5::bigint THEN 'resend'
      WHEN $5::bigint - e.now_us > $7::bigint THEN 'ahead'
      WHEN $5::bigint <= e.eff THEN 'done'
      WHEN e.paused THEN 'paused'
      WHEN e.now_us - $5::bigint > greatest($7::bigint, $8::bigint) THEN 'missed'
      ELSE 'lock' END AS v
  FROM e),
l AS MATERIALIZED (
  SELECT CASE WHEN d.v IN ('lock', 'resend') THEN pg_try_advisory_lock($1::bigint) ELSE false END AS ok FROM d),
i AS MATERIALIZED (
  SELECT d.*, l.ok, CASE WHEN d.v = 'lock' THEN CASE WHEN l.ok THEN 'grant' ELSE 'contended' END ELSE d.v END AS intent
  FROM d, l),
u AS (
  INSERT INTO bext_lock_fences AS t (namespace, key, fence, holder, acquired_at, tick_mark, tick_token)
  SELECT $2::text, $3::text,
    CASE WHEN i.intent = 'grant' THEN greatest(1, i.now_us) ELSE 0 END,
    CASE WHEN i.intent = 'grant' THEN $4::text END,
    CASE WHEN i.intent = 'grant' THEN i.ts END,
    CASE WHEN i.intent IN ('grant', 'paused', 'missed') THEN $5::bigint ELSE i.eff END,
    CASE WHEN i.intent = 'grant' THEN $9::text END
  FROM i
  WHERE i.intent IN ('grant', 'paused', 'missed')
    OR (i.intent IN ('done', 'contended') AND (i.mark IS NULL OR i.eff > i.mark))
  ON CONFLICT (namespace, key) DO UPDATE SET
    tick_mark = CASE WHEN excluded.tick_mark = $5::bigint AND ` + raiseT + ` THEN $5::bigint ELSE ` + effT + ` END,
    fence = CASE WHEN ` + grantT + ` THEN greatest(t.fence + 1, excluded.fence) ELSE t.fence END,
    tick_token = CASE WHEN ` + grantT + ` THEN excluded.tick_token ELSE t.tick_token END,
    holder = CASE WHEN ` + grantT + ` THEN excluded.holder ELSE t.holder END,
    acquired_at = CASE WHEN ` + grantT + ` THEN excluded.acquired_at ELSE t.acquired_at END
  WHERE (excluded.tick_mark = $5::bigint AND ` + raiseT + `)
    OR ` + effT + ` > coalesce(t.tick_mark, -9223372036854775808)
  RETURNING t.tick_mark, t.fence, t.tick_token IS NOT DISTINCT FROM $9::text AS won),
x AS MATERIALIZED (
  SELECT i.*, (SELECT tick_mark FROM u) AS umark, (SELECT fence FROM u) AS ufence,
    coalesce((SELECT won FROM u), false) AS won
  FROM i),
un AS MATERIALIZED (
  SELECT CASE WHEN x.intent = 'grant' AND NOT x.won THEN pg_advisory_unlock($1::bigint) END AS unlocked FROM x),
o AS MATERIALIZED (
  SELECT x.v, CASE
      WHEN x.v = 'resend' THEN CASE WHEN x.ok THEN 'granted' ELSE 'resend_held' END
      WHEN x.v = 'ahead' THEN 'ahead'
      WHEN x.intent = 'grant' THEN CASE WHEN x.won THEN 'granted' WHEN x.umark = $5::bigint THEN 'paused' ELSE 'done' END
      WHEN x.intent IN ('paused', 'missed') THEN CASE WHEN x.umark = $5::bigint THEN x.intent ELSE 'done' END
      ELSE x.intent END AS verdict,
    CASE WHEN x.v = 'resend' THEN x.fence ELSE x.ufence END AS fence,
    coalesce(x.umark, CASE WHEN x.v IN ('ahead', 'resend') THEN x.mark ELSE x.eff END) AS mark,
    x.now_us
  FROM x, un),
n AS MATERIALIZED (
  SELECT CASE WHEN $10::text <> '' AND o.v <> 'resend' AND o.verdict IN ('granted', 'paused', 'missed')
    THEN pg_notify($10::text, $5::bigint::text || ' ' || $3::text) END AS told
  FROM o)
SELECT o.verdict, o.fence, o.mark, o.now_us, pg_backend_pid(), current_setting('synchronous_commit')
FROM o, n`

	// effT, raiseT and grantT re-decide on the latest version t of the row,
	// inside tryLockTickSQL's ON CONFLICT DO UPDATE: the effective mark, T
	// still unclaimed, and T grantable (this call holds the lock, which its
	// excluded row's token says, and the key is not paused).
	effT   = `greatest(coalesce(t.tick_mark, (SELECT now_us FROM s) - $7::bigint), least($6::bigint, (SELECT now_us FROM s)))`
	raiseT = `$5::bigint > ` + effT
	grantT = `excluded.tick_token IS NOT NULL AND ` + raiseT +
		` AND NOT (t.paused AND (t.pause_until IS NULL OR (SELECT ts FROM s) < t.pause_until))`

	// releaseTickSQL gives back a try-lock-tick lock and forgets the
	// grant's token, so a late resend of the same request after the run is
	// answered done, not granted again. One round trip.
	releaseTickSQL = `WITH r AS MATERIALIZED (SELECT pg_advisory_unlock($1::bigint) AS ok),
f AS (UPDATE bext_lock_fences SET tick_token = NULL
  WHERE namespace = $2::text AND key = $3::text AND tick_token = $4::text AND (SELECT ok FROM r)
  RETURNING 1)
SELECT r.ok, (SELECT count(*) FROM f) FROM r`

	// initMarksSQL creates the mark of every key that has none at the
	// database clock, durably; existing marks stay as they are. Its rows
	// are locked in TryLockTicks's order (by key, bytewise: COLLATE "C"),
	// so it and a batch over the same keys never deadlock.
	initMarksSQL = `WITH c AS MATERIALIZED (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us, set_config('synchronous_commit', 'on', true) AS sc)
INSERT INTO bext_lock_fences AS t (namespace, key, fence, tick_mark)
SELECT $1::text, k, 0, c.us FROM c, unnest($2::text[]) AS k ORDER BY k COLLATE "C"
ON CONFLICT (namespace, key) DO UPDATE SET tick_mark = excluded.tick_mark WHERE t.tick_mark IS NULL`

	// setPauseSQL sets a key's pause flag, durably (a pause must survive a
	// crash once SetPause returned).
	setPauseSQL = `WITH c AS MATERIALIZED (SELECT set_config('synchronous_commit', 'on', true) AS sc)
INSERT INTO bext_lock_fences AS t (namespace, key, fence, paused, pause_until, pause_note)
SELECT $1::text, $2::text, 0, $3::boolean, $4::timestamptz, $5::text FROM c
ON CONFLICT (namespace, key) DO UPDATE
  SET paused = excluded.paused, pause_until = excluded.pause_until, pause_note = excluded.pause_note`

	getPauseSQL = `SELECT paused, pause_until, coalesce(pause_note, '') FROM bext_lock_fences WHERE namespace = $1::text AND key = $2::text`

	// renewSQL proves the session is alive and lists the bigint advisory
	// locks its backend holds: one statement answers the renewals of every
	// lock on the session (renewOn). pg_locks costs the same whichever
	// locks are asked for, so all of them are returned. It costs what the
	// server's whole lock table costs, so rounds send it only once per
	// renewAudit per session, pingSQL otherwise (renewRound).
	renewSQL = `SELECT pg_backend_pid(), coalesce(array_agg((classid::bigint << 32) | objid::bigint), '{}')
FROM pg_locks
WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() AND objsubid = 1`

	// pingSQL is a renew round that trusts the session's bookkeeping:
	// the session is alive, on its own backend (see renewRound).
	pingSQL = `SELECT pg_backend_pid()`

	releaseSQL = `SELECT pg_advisory_unlock($1::bigint)`

	// giveBackAllSQL unlocks each of the ids once (TryLockTicks).
	giveBackAllSQL = `SELECT count(*) FILTER (WHERE pg_advisory_unlock(id)) FROM unnest($1::bigint[]) AS id`

	// idExpr is lockID in SQL over the columns namespace and key, for List.
	idExpr = `('x' || encode(substr(sha256(convert_to(namespace, 'UTF8') || '\x00'::bytea || convert_to(key, 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint`

	// listSQL joins the granted bigint advisory locks of this database with
	// the namespace's fence rows by derived id.
	listSQL = `WITH f AS (
  SELECT key, fence, coalesce(holder, '') AS holder, ` + idExpr + ` AS id
  FROM bext_lock_fences WHERE namespace = $1::text)
SELECT f.key, f.fence, f.holder FROM f
JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = (f.id >> 32) & 4294967295
  AND l.objid::bigint = f.id & 4294967295
ORDER BY f.key`

	probeCheckSQL = `SELECT pg_backend_pid(), EXISTS (
  SELECT 1 FROM pg_locks
  WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
    AND classid = 1650817140 AND objid::bigint = pg_backend_pid() AND objsubid = 2)`
	probeUnlockSQL = `SELECT pg_advisory_unlock(1650817140, pg_backend_pid())`
)
