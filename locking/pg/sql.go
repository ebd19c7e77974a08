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
  WHERE attrelid = to_regclass('bext_lock_fences') AND attname = 'token_tick' AND NOT attisdropped)`

	// tableStateSQL is tableSchemaSQL and tableExistsSQL in one statement:
	// the schema of the bext_lock_fences the search_path finds, and whether
	// it has the newest column; no row when there is none.
	tableStateSQL = `SELECT n.nspname::text, EXISTS (
  SELECT 1 FROM pg_attribute
  WHERE attrelid = c.oid AND attname = 'token_tick' AND NOT attisdropped)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass('bext_lock_fences')`

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
ALTER TABLE bext_lock_fences ADD COLUMN IF NOT EXISTS tick_grants jsonb;
ALTER TABLE bext_lock_fences ADD COLUMN IF NOT EXISTS token_tick bigint;
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

	// A try-lock-tick is two statements, sent together in one round trip
	// and one transaction (a pgx batch: the extended protocol's implicit
	// transaction, up to the batch's single Sync), each over arrays of
	// requests: a burst of 500 ticks costs two statements, not 500. (One
	// statement per request, a 15-node CTE each, cost Postgres 100 to 200
	// µs a tick whatever was batched around it; set-based, about 20.)
	// TryLockTick is a batch of one.
	//
	// lockRowsSQL locks the requests' rows first, creating those that are
	// missing (fence 0, no mark: what a missing row decides), in key order
	// (bytewise, COLLATE "C", as InitMarks and ReleaseAll write them): two
	// nodes' batches over the same schedules wait for each other, never
	// deadlock. ON CONFLICT DO UPDATE locks every row it meets even when its
	// WHERE updates none. From then until the commit nobody else can change
	// those rows, so tryLockTicksSQL, a new statement with a new snapshot
	// (READ COMMITTED), reads each one's latest committed version and its
	// decision is final: a mark raised, or a pause set, by a transaction that
	// committed while this one waited for the row, wins.
	//
	//	$1 namespace  $2 keys (distinct)
	lockRowsSQL = `INSERT INTO bext_lock_fences AS t (namespace, key, fence)
SELECT $1::text, k, 0 FROM unnest($2::text[]) AS k ORDER BY k COLLATE "C"
ON CONFLICT (namespace, key) DO UPDATE SET fence = t.fence WHERE false`

	// tryLockTicksSQL decides each request as locking.DecideTick does, all on
	// one reading of the database clock, on the rows lockRowsSQL locked.
	//
	//	$1 namespace  $2 holder  $3 the channel raised marks are told on ('' for none)
	//	per request (arrays, one key at most once): $4 key (the mark's row)
	//	$5 lock id  $6 T  $7 floor  $8 max skew  $9 window (microseconds)  $10 token
	//	$11 keep (microseconds, see below)  $12 per tick  $13 TTL (microseconds)
	//	$14 resend (locking.TickRequest.Resend)  $15 owned (the request
	//	carries its caller's Token, not one drawn for it)
	//
	// A resend answered contended or done, decided anew (no grant entry
	// of its token and T), adds an entry under 'T/token' (µs, as text):
	// [verdict, token, until], until its keep from now. So does a request
	// carrying its caller's Token (owned; first attempt or resend)
	// answered paused or missed: the mark is then at T, and the resend that
	// follows a lost reply would be answered done, its node recording
	// nothing of the tick it consumed; answered paused or missed from the
	// entry instead, it raises nothing (no notification) and answers the
	// entry's Before (below). A later request
	// with that token and T (a late copy of an earlier attempt, delayed on
	// the network, or another resend) is answered that verdict ('decided')
	// and changes nothing: its node was told contended and moved on, and
	// decided anew once the lock is free it would be granted, T run
	// nowhere and the lock held for nothing. A first attempt writes no such
	// entry (every node but one, every tick): without a resend its node
	// never sends it again. The entries are pruned with the others (their
	// third element is their until), and ignored by the lookups of grants,
	// which are by T alone.
	//
	// A resend (the token and T of a grant whose reply was lost) takes the
	// lock again if it is free and answers with the fence its grant drew,
	// extending the grant's lease; resend_held when the lock is still held
	// (by the first call's session, which the server has not dropped yet):
	// not definite, the caller resends. Every grant, of a schedule lock or a
	// per-tick one, adds an entry to its row's tick_grants, which maps its T
	// (µs, as text) to [fence, token, until]: a call is a resend when the
	// entry of its T carries its token and until has not passed, and, for a
	// schedule lock, the row's fence is still the entry's. Not the mark:
	// while a schedule lock's grant of T is held (its reply lost), a later
	// tick may be decided paused or missed, which raises the mark without
	// touching the lock (lockertest's Tick/ResentAfterPausedTick and
	// ResentAfterMissedTick). Not the row's one token: per-tick grants of
	// T2 come while T1 runs (Tick/PerTickResentAfterLaterGrant). Not the
	// token alone: another T asked with a granted call's token is decided as
	// any other request (Tick/TokenReusedForAnotherTick). And a schedule
	// lock's row fence moves with every later acquisition of the key (a
	// later tick's grant, a plain TryLock by `lock run` or a manual run):
	// then the grant's lease ended with its lock, and its resend is decided
	// as any other request (done), never answered with a fence drawn for
	// another acquisition, nor by taking the lock again below the last
	// holder's fence (Tick/ResendAfterLaterLock).
	//
	// An entry's fourth element is its lease's end: the grant's (or the
	// last resend's) clock plus its TTL, the lease its caller counts on.
	// Until then a resend is answered as above, whatever was decided
	// since: the caller may still be running T. Past it, and until the
	// entry's until (locking.GrantKeep), the grant's lease ended without a
	// release (its caller's reply was lost for longer than the TTL), and
	// the resend is decided by locking.DecideLapsedResend: the lock taken
	// again under the grant's fence when the key is not paused and, for a
	// schedule lock, the mark is still T; else 'expired' with the grant's
	// fence, nothing changed. A found entry of a schedule lock whose row
	// fence moved (another acquisition) is expired too, not decided as a
	// new request: its caller records T as not run, where done would
	// have it skipped with no word. An entry without the fourth element
	// (written by an older node) keeps the older rule: its lease lasts
	// until its until.
	//
	// until is the grant's clock plus its own keep, twice max(TTL, MaxLease)
	// (startTick): a resend comes while its caller counts on the lease, or,
	// told resend_held, until the server dropped the first call's session.
	// A granted resend extends it by its own keep from now, as a renewal
	// extends a lease (Tick/ResendExtendsLease, PerTickResendExtendsEntry).
	// A grant drops the entries whose until has passed; Release drops its
	// own (releaseTickSQL, forgetTickSQL when its session had died). Each
	// entry lasts by what its own request asked, not by what the request
	// that prunes it asks (TestPerTickGrantKeptForItsOwnLease). An entry
	// without until (written before it came) lasts until its T lies more
	// than the pruning or resending request's keep + max(skew, window)
	// before the clock. So the entries are the schedule's running grants,
	// and for that long those whose holder ended without a release.
	//
	// tick_token and token_tick (the row's latest grant's token and T) are
	// still written and cleared as before: nodes of earlier releases
	// recognise their own resends by them (or by the token alone, before
	// token_tick), and a call's token is its own (drawn by startTick or by
	// the caller for its own retries, which go to the same Locker), so a
	// newer node never carries an older node's token, nor an older node a
	// newer's: both can run on one table during a rolling upgrade, each
	// answering its own resends by its own rule. An older node grants a
	// schedule lock without an entry, leaving the newer nodes' entries of
	// the row to their until.
	//
	// The advisory lock is tried only once the row decided lock or resend:
	// it is never taken and given back.
	// The fence is drawn only with a grant; the update of a granted row
	// always happens (the row is locked), 'unwritten' would say it did not.
	//
	// Each request's row is found by its whole key (a LATERAL lookup that
	// OFFSET 0 keeps from being flattened into a join) and updated by the
	// ctid that lookup read: nothing else can move a row lockRowsSQL locked.
	// Left to plan a join on (namespace, key) generically, on a table whose
	// statistics said it was small, Postgres scanned the namespace once per
	// request and filtered on the key: quadratic, 140–190 ms for a batch of
	// 500 instead of about 10 (TestTickBatchLooksUpEachRow).
	//
	// The marks must survive a crash once a run was granted on them, so the
	// transaction commits with synchronous_commit = on whatever the session
	// says (set_config's is_local: this transaction's own, read at its
	// commit). Each row returns the setting in force as a check.
	//
	// Each row answers, after the mark, the stored mark a step that raised
	// it (granted, paused, missed; decided anew) found before it:
	// locking.TickAnswer.Before, NULL when the key had none. A grant's
	// entry keeps it as its fifth element, a paused or missed verdict's
	// entry as its fourth (null: none), and a resend answered from the
	// entry (granted again, or paused or missed 'decided') answers it
	// again: its first attempt's reply lost, the resend's node records the
	// ticks that step passed over. An entry written before it came has
	// none.
	//
	// A mark raised to T (granted, paused, missed; not a resent call's,
	// which its first call told) is told to the cluster's listeners
	// (locking.TickWatcher, watch.go) with pg_notify($3, 'T key'), one
	// notification per mark as nodes of every version read them, in key
	// order. They are
	// part of the transaction, so delivered only once the raised marks
	// committed (durably, as above), and add nothing to the round trip: the
	// notifying session does not listen. A payload is at most ~1,050 bytes
	// (MaxKeyLen 1024), far below NOTIFY's 8,000. A notifying commit takes
	// Postgres's one lock on the notification queue (PreCommit_Notify) until
	// its commit record is flushed: a batch pays it once.
	tryLockTicksSQL = `WITH c AS MATERIALIZED (
  SELECT ts, (extract(epoch FROM ts) * 1000000)::bigint AS now_us, set_config('synchronous_commit', 'on', true) AS sc
  FROM clock_timestamp() AS ts),
e AS MATERIALIZED (
  SELECT q.key, q.id, q.tick, q.skew, q.win, q.tok, q.keep, q.per, q.ttl, q.ord, c.ts, c.now_us,
    r.tick_mark AS mark, r.fence AS rfence, r.rid,
    r.tick_grants -> q.tick::text AS tg, r.tick_grants -> (q.tick::text || '/' || q.tok) AS dg, q.resend, q.owned,
    coalesce(r.paused AND (r.pause_until IS NULL OR c.ts < r.pause_until), false) AS paused,
    greatest(coalesce(r.tick_mark, c.now_us - q.skew), least(q.floor, c.now_us)) AS eff
  FROM c CROSS JOIN unnest($4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::text[], $11::bigint[], $12::boolean[], $13::bigint[], $14::boolean[], $15::boolean[])
      WITH ORDINALITY AS q(key, id, tick, floor, skew, win, tok, keep, per, ttl, resend, owned, ord)
    LEFT JOIN LATERAL (
      SELECT f.tick_mark, f.fence, f.paused, f.pause_until, f.tick_grants, f.ctid AS rid
      FROM bext_lock_fences f WHERE f.namespace = $1::text AND f.key = q.key OFFSET 0) AS r ON true),
d AS MATERIALIZED (
  SELECT e.*, CASE
      WHEN e.tg ->> 1 = e.tok
        AND coalesce((e.tg ->> 2)::bigint, e.tick + e.keep + greatest(e.skew, e.win)) >= e.now_us THEN CASE
          WHEN NOT (e.per OR (e.tg ->> 0)::bigint = e.rfence) THEN 'expired'
          WHEN coalesce((e.tg ->> 3)::bigint, e.now_us + 1) > e.now_us THEN 'resend'
          WHEN e.paused OR (NOT e.per AND e.mark IS DISTINCT FROM e.tick) THEN 'expired'
          ELSE 'resend' END
      WHEN (e.dg ->> 2)::bigint >= e.now_us AND e.dg ->> 1 = e.tok THEN 'decided'
      WHEN e.tick - e.now_us > e.skew THEN 'ahead'
      WHEN e.tick <= e.eff THEN 'done'
      WHEN e.paused THEN 'paused'
      WHEN e.now_us - e.tick > greatest(e.skew, e.win) THEN 'missed'
      ELSE 'lock' END AS v
  FROM e),
i0 AS MATERIALIZED (
  SELECT d.*, l.ok, CASE WHEN d.v = 'lock' THEN CASE WHEN l.ok THEN 'grant' ELSE 'contended' END ELSE d.v END AS intent
  FROM d, LATERAL (SELECT CASE WHEN d.v IN ('lock', 'resend') THEN pg_try_advisory_lock(d.id) ELSE false END AS ok) AS l),
i AS MATERIALIZED (
  SELECT i0.*, ((i0.resend AND i0.intent IN ('done', 'contended')) OR (i0.owned AND i0.intent IN ('paused', 'missed'))) AS rec FROM i0),
u AS (
  UPDATE bext_lock_fences AS t SET
    tick_mark = CASE WHEN i.intent IN ('grant', 'paused', 'missed') THEN i.tick WHEN i.intent = 'resend' THEN t.tick_mark ELSE i.eff END,
    fence = CASE WHEN i.intent = 'grant' THEN greatest(t.fence + 1, 1, i.now_us) ELSE t.fence END,
    tick_token = CASE WHEN i.intent = 'grant' THEN i.tok ELSE t.tick_token END,
    token_tick = CASE WHEN i.intent = 'grant' THEN i.tick ELSE t.token_tick END,
    tick_grants = CASE WHEN i.intent = 'grant' THEN
        coalesce((SELECT jsonb_object_agg(g.k, g.v) FROM jsonb_each(t.tick_grants) AS g(k, v)
          WHERE coalesce((g.v ->> 2)::bigint, g.k::bigint + i.keep + greatest(i.skew, i.win)) >= i.now_us), '{}'::jsonb)
        || jsonb_build_object(i.tick::text, jsonb_build_array(greatest(t.fence + 1, 1, i.now_us), i.tok, i.now_us + i.keep, i.now_us + i.ttl, i.mark))
      WHEN i.intent = 'resend' THEN
        jsonb_set(jsonb_set(t.tick_grants, ARRAY[i.tick::text, '2'], to_jsonb(greatest(coalesce((i.tg ->> 2)::bigint, 0), i.now_us + i.keep))),
          ARRAY[i.tick::text, '3'], to_jsonb(i.now_us + i.ttl))
      WHEN i.rec THEN
        coalesce((SELECT jsonb_object_agg(g.k, g.v) FROM jsonb_each(t.tick_grants) AS g(k, v)
          WHERE coalesce((g.v ->> 2)::bigint, g.k::bigint + i.keep + greatest(i.skew, i.win)) >= i.now_us), '{}'::jsonb)
        || jsonb_build_object(i.tick::text || '/' || i.tok, jsonb_build_array(i.intent, i.tok, i.now_us + i.keep,
          CASE WHEN i.intent IN ('paused', 'missed') THEN i.mark END))
      ELSE t.tick_grants END,
    holder = CASE WHEN i.intent = 'grant' THEN $2::text ELSE t.holder END,
    acquired_at = CASE WHEN i.intent = 'grant' THEN i.ts ELSE t.acquired_at END
  FROM i
  WHERE t.ctid = i.rid
    AND (i.intent IN ('grant', 'paused', 'missed') OR (i.intent = 'resend' AND i.ok) OR i.rec
      OR (i.intent IN ('done', 'contended') AND (i.mark IS NULL OR i.eff > i.mark)))
  RETURNING t.key, t.tick_mark, t.fence),
n AS MATERIALIZED (
  SELECT count(pg_notify($3::text, r.line)) AS told FROM (
    SELECT i.tick::text || ' ' || i.key AS line
    FROM i JOIN u ON u.key = i.key
    WHERE $3::text <> '' AND i.intent IN ('grant', 'paused', 'missed')
    ORDER BY i.key COLLATE "C") AS r)
SELECT i.ord, CASE
    WHEN i.v = 'resend' THEN CASE WHEN i.ok THEN 'granted' ELSE 'resend_held' END
    WHEN i.v = 'ahead' THEN 'ahead'
    WHEN i.v = 'decided' THEN i.dg ->> 0
    WHEN i.intent = 'grant' THEN CASE WHEN u.key IS NOT NULL THEN 'granted' ELSE 'unwritten' END
    ELSE i.intent END,
  CASE WHEN i.v IN ('resend', 'expired') THEN (i.tg ->> 0)::bigint ELSE u.fence END,
  CASE WHEN i.v = 'decided' THEN i.mark ELSE coalesce(u.tick_mark, CASE WHEN i.v IN ('ahead', 'resend', 'expired') THEN i.mark ELSE i.eff END) END,
  CASE WHEN i.intent IN ('grant', 'paused', 'missed') THEN i.mark
    WHEN i.v = 'resend' AND i.ok THEN (i.tg ->> 4)::bigint
    WHEN i.v = 'decided' AND i.dg ->> 0 IN ('paused', 'missed') THEN (i.dg ->> 3)::bigint END,
  i.now_us, pg_backend_pid(), current_setting('synchronous_commit')
FROM n, i LEFT JOIN u ON u.key = i.key
ORDER BY i.ord`

	// releaseTickSQL gives back a try-lock-tick lock and forgets its grant:
	// the row's token (tick_token, for nodes of earlier releases) and the
	// grant's tick_grants entry, left NULL once empty. A late resend of the
	// same request after the run is then decided as any other request
	// (done), not granted again. One round trip.
	//
	//	$1 lock id  $2 namespace  $3 key (the mark's row)  $4 token  $5 T (µs)
	releaseTickSQL = `WITH r AS MATERIALIZED (SELECT pg_advisory_unlock($1::bigint) AS ok),
f AS (UPDATE bext_lock_fences SET
    tick_token = CASE WHEN tick_token = $4::text THEN NULL ELSE tick_token END,
    tick_grants = CASE WHEN tick_grants -> ($5::bigint)::text ->> 1 = $4::text THEN nullif(tick_grants - ($5::bigint)::text, '{}'::jsonb) ELSE tick_grants END
  WHERE namespace = $2::text AND key = $3::text AND (tick_token = $4::text OR tick_grants -> ($5::bigint)::text ->> 1 = $4::text) AND (SELECT ok FROM r)
  RETURNING 1)
SELECT r.ok, (SELECT count(*) FROM f) FROM r`

	// releaseTakeSQL gives back a TakeRequest's lock whose taker was not
	// heard yet (no renewal: Renew's hearTake) and, if it was still held,
	// moves the take's bext_taken row to bext_taken_heard (moveTakeSQL): a
	// release of a live take is its taker's word that it heard (and ran
	// the trigger, or gives it back: GiveBack), so the trigger never goes
	// back to its queue by itself (takeRequestSQL). A lock lost first
	// keeps its row in bext_taken: its taker never started the trigger.
	//
	//	$1 lock id  $2 namespace  $3 schedule  $4 the take's token
	releaseTakeSQL = `WITH r AS MATERIALIZED (SELECT pg_advisory_unlock($1::bigint) AS ok),
d AS (DELETE FROM bext_taken
  WHERE namespace = $2::text AND schedule = $3::text AND token = $4::text AND (SELECT ok FROM r)
  RETURNING namespace, schedule, token, seq, id, request, fence, until),` + moveTakeSQL + `
SELECT r.ok FROM r`

	// hearTakeSQL moves a take's bext_taken row to bext_taken_heard on its
	// first renewal (Renew's hearTake), and counts it; the row stays there
	// until its until, for a give-back (giveBackSQL).
	//
	//	$1 namespace  $2 schedule  $3 the take's token
	hearTakeSQL = `WITH d AS (DELETE FROM bext_taken WHERE namespace = $1::text AND schedule = $2::text AND token = $3::text
  RETURNING namespace, schedule, token, seq, id, request, fence, until),` + moveTakeSQL + `
SELECT count(*) FROM d`

	// moveTakeSQL ends hearTakeSQL's and releaseTakeSQL's WITH: it
	// stores the row d deleted from bext_taken in bext_taken_heard, in the
	// same statement (the row is in one table or the other, for every
	// reader), and sweeps the schedule's heard rows past their until but
	// the one moved (a row is modified once per statement).
	moveTakeSQL = `
m AS (INSERT INTO bext_taken_heard AS t (namespace, schedule, token, seq, id, request, fence, until)
  SELECT * FROM d
  ON CONFLICT (namespace, schedule, token) DO UPDATE
    SET seq = excluded.seq, id = excluded.id, request = excluded.request, fence = excluded.fence, until = excluded.until
  RETURNING 1),
s AS (DELETE FROM bext_taken_heard t USING (SELECT DISTINCT namespace, schedule, token FROM d) x
  WHERE t.namespace = x.namespace AND t.schedule = x.schedule AND t.token <> x.token AND t.until < clock_timestamp()
  RETURNING 1)`

	// forgetTickSQL forgets a released grant as releaseTickSQL does, on any
	// session, when its own session could not: it died (or the unlock
	// found the lock gone) before the release. Released all the same, the
	// grant must not answer a resend by taking its lock again: the caller
	// gave the tick up, or ran it.
	//
	//	$1 namespace  $2 key (the mark's row)  $3 token  $4 T (µs)
	forgetTickSQL = `UPDATE bext_lock_fences SET
    tick_token = CASE WHEN tick_token = $3::text THEN NULL ELSE tick_token END,
    tick_grants = CASE WHEN tick_grants -> ($4::bigint)::text ->> 1 = $3::text THEN nullif(tick_grants - ($4::bigint)::text, '{}'::jsonb) ELSE tick_grants END
  WHERE namespace = $1::text AND key = $2::text AND (tick_token = $3::text OR tick_grants -> ($4::bigint)::text ->> 1 = $3::text)`

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

	// lockTimeoutSQL sets lock_timeout for the rest of a tick batch's
	// transaction (ticks.go, lockTimeout).
	lockTimeoutSQL = `SELECT set_config('lock_timeout', $1::text, true)`

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

	// probeCheckSQL finds the probe lock on the statement's backend by
	// giving it back: pg_advisory_unlock answers true only on the session
	// that holds it (false, with a warning, on any other). One statement,
	// without reading pg_locks, whose first read on a new backend cost the
	// server 3 ms of CPU, and without a round trip for the unlock.
	probeCheckSQL = `SELECT pg_backend_pid(), pg_advisory_unlock(1650817140, pg_backend_pid())`
)
