package pg

// The cluster state (cluster.Store, cluster.go) in tables beside
// bext_lock_fences, every row keyed by the namespace first.

const (
	// clusterTablesExistSQL avoids CREATE (and ALTER) when every table and
	// every column added since is there, so a role without CREATE or ALTER
	// privilege works once an operator made or migrated them.
	clusterTablesExistSQL = `SELECT to_regclass('bext_runs') IS NOT NULL
  AND (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass('bext_runs')
    AND attname IN ('anomaly', 'run_by') AND attnum > 0 AND NOT attisdropped) = 2
  AND to_regclass('bext_run_counts') IS NOT NULL
  AND to_regclass('bext_nodes') IS NOT NULL
  AND to_regclass('bext_requests') IS NOT NULL
  AND to_regclass('bext_accepted') IS NOT NULL
  AND to_regclass('bext_taken') IS NOT NULL
  AND to_regclass('bext_taken_heard') IS NOT NULL
  AND to_regclass('bext_skips') IS NOT NULL
  AND to_regclass('bext_actions') IS NOT NULL
  AND to_regclass('bext_stops') IS NOT NULL`

	// createClusterSQL runs under the transaction-level advisory lock that
	// serialises the creation of bext_lock_fences, as one simple-protocol
	// message.
	//
	// bext_runs holds a run per row; times are nanoseconds since the epoch,
	// so a run reads back exactly as recorded. bext_runs_newest serves
	// Runs, LastRuns and the trim (newest first per schedule); the primary
	// key makes recording a run twice (a batch resent after a lost reply)
	// store it once. bext_run_counts counts each schedule's rows, so the
	// trim runs only when the count passes the bound (recordRunsSQL).
	//
	// bext_requests is the queues of manual runs, in seq order;
	// bext_requests_id makes a resent Enqueue store its requests once.
	// bext_accepted remembers which node took which request, for a day.
	// bext_taken keeps, under a take's token, the trigger it took (its
	// queue row as it was) and the fence of its lock, for the take's
	// resends (TakeRequest; until bounds how long it answers them) and its
	// give-back (giveBackSQL), until its taker is heard from. A take that
	// finds the schedule's lock free puts the triggers of its rows back in
	// the queue (takeRequestSQL). Its taker's word that it heard the take,
	// its first renewal (hearTakeSQL) or a release of the live lock
	// (releaseTakeSQL), moves the row, in that same statement, to
	// bext_taken_heard: there it answers no resend and never goes back to
	// the queue by itself, and is kept until until, for a give-back
	// (hearTakeSQL and releaseTakeSQL sweep the schedule's rows past it).
	// A row in bext_taken thus means, for every version, a take not heard
	// back: nodes of the versions before GiveBack, which know only
	// bext_taken and put back or take every row of it, run beside these
	// (never reading bext_taken_heard) without running a heard trigger
	// again. A new table, not a column, so no ALTER right is needed.
	//
	// bext_runs' anomaly and run_by (a run's Anomaly and By: "by" is a
	// reserved word) came after the table: added by ALTER on a table made
	// before them, NOT NULL DEFAULT '' so that nodes of older versions,
	// which name only the columns they know, keep inserting runs. Adding a
	// column with a constant default rewrites no row.
	//
	// bext_skips holds the skip records (a tick consumed without a run),
	// one per schedule and tick (the primary key: the first recorded
	// stays), apart from bext_runs so a paused schedule's skips never push
	// its runs out of its history; its primary key also serves Skips and
	// the trim (newest tick first). Nodes of versions before it never read
	// or write it, so they run beside it unchanged.
	createClusterSQL = `BEGIN;
SELECT pg_advisory_xact_lock(1650817140, 0);
CREATE TABLE IF NOT EXISTS bext_runs (
    namespace   text    NOT NULL,
    schedule    text    NOT NULL,
    run_id      text    NOT NULL,
    seq         bigint  GENERATED ALWAYS AS IDENTITY,
    started_ns  bigint  NOT NULL,
    tick_ns     bigint  NOT NULL,
    duration_ns bigint  NOT NULL,
    fence       bigint  NOT NULL,
    attempts    integer NOT NULL,
    manual      boolean NOT NULL,
    node        text    NOT NULL,
    result      text    NOT NULL,
    error       text    NOT NULL,
    output_tail text    NOT NULL,
    PRIMARY KEY (namespace, schedule, run_id)
);
CREATE INDEX IF NOT EXISTS bext_runs_newest ON bext_runs (namespace, schedule, started_ns DESC, seq DESC);
ALTER TABLE bext_runs ADD COLUMN IF NOT EXISTS anomaly text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS run_by text NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS bext_run_counts (
    namespace text   NOT NULL,
    schedule  text   NOT NULL,
    n         bigint  NOT NULL,
    trimmed   boolean NOT NULL,
    PRIMARY KEY (namespace, schedule)
);
CREATE TABLE IF NOT EXISTS bext_nodes (
    namespace  text        NOT NULL,
    node_id    text        NOT NULL,
    expires_at timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL,
    node       jsonb       NOT NULL,
    PRIMARY KEY (namespace, node_id)
);
CREATE TABLE IF NOT EXISTS bext_requests (
    namespace text    NOT NULL,
    schedule  text    NOT NULL,
    seq       bigint  GENERATED ALWAYS AS IDENTITY,
    id        text    NOT NULL,
    backfill  boolean NOT NULL,
    request   jsonb   NOT NULL,
    PRIMARY KEY (namespace, schedule, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS bext_requests_id ON bext_requests (namespace, id);
CREATE TABLE IF NOT EXISTS bext_accepted (
    namespace   text        NOT NULL,
    schedule    text        NOT NULL,
    id          text        NOT NULL,
    node        text        NOT NULL,
    accepted_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, schedule, id)
);
CREATE TABLE IF NOT EXISTS bext_taken (
    namespace text        NOT NULL,
    schedule  text        NOT NULL,
    token     text        NOT NULL,
    seq       bigint      NOT NULL,
    id        text        NOT NULL,
    request   jsonb       NOT NULL,
    fence     bigint      NOT NULL,
    until     timestamptz NOT NULL,
    PRIMARY KEY (namespace, schedule, token)
);
CREATE TABLE IF NOT EXISTS bext_taken_heard (
    namespace text        NOT NULL,
    schedule  text        NOT NULL,
    token     text        NOT NULL,
    seq       bigint      NOT NULL,
    id        text        NOT NULL,
    request   jsonb       NOT NULL,
    fence     bigint      NOT NULL,
    until     timestamptz NOT NULL,
    PRIMARY KEY (namespace, schedule, token)
);
CREATE TABLE IF NOT EXISTS bext_skips (
    namespace text   NOT NULL,
    schedule  text   NOT NULL,
    tick_ns   bigint NOT NULL,
    node      text   NOT NULL,
    reason    text   NOT NULL,
    note      text   NOT NULL,
    at_ns     bigint NOT NULL,
    PRIMARY KEY (namespace, schedule, tick_ns)
);
CREATE TABLE IF NOT EXISTS bext_actions (
    namespace text   NOT NULL,
    schedule  text   NOT NULL,
    seq       bigint GENERATED ALWAYS AS IDENTITY,
    action    jsonb  NOT NULL,
    PRIMARY KEY (namespace, schedule, seq)
);
CREATE TABLE IF NOT EXISTS bext_stops (
    namespace  text        NOT NULL,
    id         text        NOT NULL,
    expires_at timestamptz NOT NULL,
    request    jsonb       NOT NULL,
    acted      jsonb       NOT NULL DEFAULT '{}',
    PRIMARY KEY (namespace, id)
);
COMMIT;`

	// The operators' acts (control.go). bext_actions keeps each
	// schedule's actions, newest by seq; recordActionSQL trims the ones
	// past keep in the statement that adds one. bext_stops keeps the stop
	// requests until expires_at (the database clock), each node's part in
	// acted (node -> its stopped runs); expired rows are dropped by the
	// next request. New tables: nodes of earlier versions never touch them.
	recordActionSQL = `WITH ins AS (
  INSERT INTO bext_actions (namespace, schedule, action) VALUES ($1::text, $2::text, $3::jsonb) RETURNING seq)
DELETE FROM bext_actions WHERE namespace = $1::text AND schedule = $2::text AND seq <= (
  SELECT seq FROM bext_actions WHERE namespace = $1::text AND schedule = $2::text
  ORDER BY seq DESC OFFSET $4::bigint LIMIT 1)`
	actionsSQL = `SELECT action FROM bext_actions WHERE namespace = $1::text AND schedule = $2::text
ORDER BY seq DESC LIMIT $3::bigint`
	requestStopSQL = `WITH gone AS (
  DELETE FROM bext_stops WHERE namespace = $1::text AND expires_at <= clock_timestamp())
INSERT INTO bext_stops (namespace, id, expires_at, request)
VALUES ($1::text, $2::text, clock_timestamp() + $3::bigint * interval '1 microsecond', $4::jsonb)
ON CONFLICT (namespace, id) DO NOTHING`
	stopRequestsSQL = `SELECT request, acted FROM bext_stops WHERE namespace = $1::text AND expires_at > clock_timestamp()`
	stopActedSQL    = `UPDATE bext_stops SET acted = acted || jsonb_build_object($3::text, $4::jsonb)
WHERE namespace = $1::text AND id = $2::text AND expires_at > clock_timestamp()`
	cancelQueueSQL = `WITH d AS (DELETE FROM bext_requests WHERE namespace = $1::text AND schedule = $2::text RETURNING 1)
SELECT count(*) FROM d`

	// recordSkipsSQL stores a batch of skips in one statement and one
	// round trip, one per schedule and tick, and trims the schedules whose
	// skips grew past their bound in that same statement.
	//
	//	$1 namespace  $2 keep  $3 trim threshold (keep + slack)
	//	$4.. the skips, one array per column
	//
	// d keeps the first skip of each tick of the batch (DISTINCT ON, by
	// batch order: an insert may not touch one row twice), and ON CONFLICT
	// DO NOTHING keeps a tick already stored, by any node: the first
	// record of a tick stays.
	//
	// The trim runs, as recordRunsSQL's, only once a schedule passes the
	// threshold (trimThreshold: once every keep/10 skips, not every one),
	// but without a count row: cut reads the schedule's newest threshold+1
	// stored ticks (a backward scan of the primary key, index only, with
	// LIMIT: the stored skips of other schedules are never read) and the
	// batch's; past the threshold, the keep-th newest of them is the cut:
	// stored rows older are deleted, batch rows older are not inserted.
	// (The newest keep of all stored ticks are among the newest
	// threshold+1, so reading no more is exact.) A batch committed by
	// another node after this statement's snapshot is not ranked; the next
	// trim takes it. Two statements never deadlock: the trim locks the rows
	// it deletes with SKIP LOCKED (a row another trim holds is that trim's
	// to delete), and the inserts go in key order.
	recordSkipsSQL = `WITH b AS MATERIALIZED (
  SELECT * FROM unnest($4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::bigint[])
    WITH ORDINALITY AS b(schedule, tick_ns, node, reason, note, at_ns, ord)),
d AS MATERIALIZED (
  SELECT DISTINCT ON (b.schedule, b.tick_ns) b.* FROM b ORDER BY b.schedule, b.tick_ns, b.ord),
cut AS MATERIALIZED (
  SELECT s.schedule, t.ticks[$2::bigint::integer] AS cut
  FROM (SELECT DISTINCT d.schedule FROM d) AS s CROSS JOIN LATERAL (
    SELECT array_agg(x.tick_ns ORDER BY x.tick_ns DESC) AS ticks FROM (
      (SELECT f.tick_ns FROM bext_skips f WHERE f.namespace = $1::text AND f.schedule = s.schedule
        ORDER BY f.tick_ns DESC LIMIT $3::bigint + 1)
      UNION
      SELECT d.tick_ns FROM d WHERE d.schedule = s.schedule) AS x) AS t
  WHERE cardinality(t.ticks) > $3::bigint),
del AS (
  DELETE FROM bext_skips f USING (
    SELECT o.tid FROM cut CROSS JOIN LATERAL (
      SELECT g.ctid AS tid FROM bext_skips g
      WHERE g.namespace = $1::text AND g.schedule = cut.schedule AND g.tick_ns < cut.cut
      FOR UPDATE SKIP LOCKED) AS o) AS x
  WHERE f.ctid = x.tid
  RETURNING 1),
ins AS (
  INSERT INTO bext_skips (namespace, schedule, tick_ns, node, reason, note, at_ns)
  SELECT $1::text, d.schedule, d.tick_ns, d.node, d.reason, d.note, d.at_ns
  FROM d LEFT JOIN cut ON cut.schedule = d.schedule
  WHERE cut.cut IS NULL OR d.tick_ns >= cut.cut
  ORDER BY d.schedule, d.tick_ns
  ON CONFLICT (namespace, schedule, tick_ns) DO NOTHING
  RETURNING 1)
SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM del)`

	skipsSQL = `SELECT schedule, tick_ns, node, reason, note, at_ns FROM bext_skips
WHERE namespace = $1::text AND schedule = $2::text
ORDER BY tick_ns DESC LIMIT $3::bigint`

	// recordRunsSQL stores a batch of runs in one statement and one round
	// trip, and trims the histories that grew past their bound.
	//
	//	$1 namespace  $2 keep  $3 trim threshold (keep + slack)
	//	$4.. the runs, one array per column
	//
	// The trim does not run per insert. The count upsert (cnt) adds the
	// batch to each schedule's row count and says whether the count now
	// passes the threshold; only those schedules are trimmed, back to keep
	// rows, so a schedule is trimmed once every slack runs, and the counter
	// is one small row update per schedule per batch (its trimmed column
	// is how the upsert tells the rest of the statement; RETURNING cannot
	// read the proposed row). A schedule's first batch stores its raw
	// size even when over the threshold: the count is then high, which
	// only makes the next trim come early. cnt also serialises
	// the trims of one schedule: the rest of the statement reads its
	// RETURNING, so it runs under the count row's lock, held to the
	// commit. The rows are upserted in schedule order, so two batches
	// never deadlock on them.
	//
	// The trim ranks the stored rows (the statement's snapshot) and the
	// batch together, newest first: stored rows past keep are deleted,
	// batch rows past keep are not inserted (a batch cannot delete what it
	// inserts itself). The ranking partitions by a number per trimmed
	// schedule, not by its text (a collation-aware sort of every candidate
	// cost most of a trim), and deletes by ctid, which is stable within the
	// statement. (A row is updated only by ins, below, which the trim's
	// delete of the same row skips: a row is modified once per statement.)
	// A batch committed by another node after this statement's snapshot
	// is not ranked; it is counted, so the next trim takes it.
	//
	// One record per run id (the primary key): a run recorded again (a
	// batch resent) is stored once, and a run recorded unstarted
	// (attempts 0: a manual run given back before it started, recorded
	// lock_lost under its request's id) is replaced by the real run of
	// that id (attempts > 0), never the other way (cluster.Store's
	// RecordRuns). A batch with both keeps the real run (DISTINCT ON: an
	// upsert may not touch one row twice).
	//
	// The stored rows of each trimmed schedule are looked up by its whole
	// key (a LATERAL lookup that OFFSET 0 keeps from being flattened into
	// a join), as the tick batch's rows are (sql.go). Left to plan a join,
	// on a table whose statistics said it was small, Postgres read every
	// run of the namespace and filtered on the schedule: one schedule's
	// trim read the whole history of every other
	// (TestRunTrimReadsOnlyItsSchedule).
	recordRunsSQL = `WITH b AS MATERIALIZED (
  SELECT * FROM unnest($4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[],
      $10::integer[], $11::boolean[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[])
    WITH ORDINALITY AS b(schedule, run_id, started_ns, tick_ns, duration_ns, fence,
      attempts, manual, node, result, error, output_tail, anomaly, run_by, ord)),
cnt AS (
  INSERT INTO bext_run_counts AS t (namespace, schedule, n, trimmed)
  SELECT $1::text, b.schedule, count(*), count(*) > $3::bigint FROM b GROUP BY b.schedule ORDER BY b.schedule
  ON CONFLICT (namespace, schedule) DO UPDATE
    SET n = CASE WHEN t.n + excluded.n > $3::bigint THEN $2::bigint ELSE t.n + excluded.n END,
      trimmed = t.n + excluded.n > $3::bigint
  RETURNING t.schedule, t.trimmed),
tr AS MATERIALIZED (SELECT schedule, row_number() OVER () AS g FROM cnt WHERE trimmed),
rk AS MATERIALIZED (
  SELECT x.*, row_number() OVER (PARTITION BY x.g ORDER BY x.started_ns DESC, x.new DESC, x.ord DESC) AS rn
  FROM (
    SELECT tr.g, r.tid, r.started_ns, false AS new, r.seq AS ord
      FROM tr CROSS JOIN LATERAL (
        SELECT f.ctid AS tid, f.started_ns, f.seq FROM bext_runs f
        WHERE f.namespace = $1::text AND f.schedule = tr.schedule OFFSET 0) AS r
    UNION ALL
    SELECT tr.g, NULL::tid, b.started_ns, true, b.ord FROM tr JOIN b ON b.schedule = tr.schedule) x),
del AS (
  DELETE FROM bext_runs r USING rk
  WHERE NOT rk.new AND rk.rn > $2::bigint AND r.ctid = rk.tid
  RETURNING 1),
ins AS (
  INSERT INTO bext_runs (namespace, schedule, run_id, started_ns, tick_ns, duration_ns, fence,
      attempts, manual, node, result, error, output_tail, anomaly, run_by)
  SELECT $1::text, b.schedule, b.run_id, b.started_ns, b.tick_ns, b.duration_ns, b.fence,
      b.attempts, b.manual, b.node, b.result, b.error, b.output_tail, b.anomaly, b.run_by
  FROM (SELECT DISTINCT ON (b.schedule, b.run_id) b.* FROM b ORDER BY b.schedule, b.run_id, b.attempts > 0 DESC, b.ord) AS b
  WHERE NOT EXISTS (SELECT 1 FROM rk WHERE rk.new AND rk.rn > $2::bigint AND rk.ord = b.ord)
  ORDER BY b.ord
  ON CONFLICT (namespace, schedule, run_id) DO UPDATE
    SET started_ns = excluded.started_ns, tick_ns = excluded.tick_ns, duration_ns = excluded.duration_ns,
      fence = excluded.fence, attempts = excluded.attempts, manual = excluded.manual, node = excluded.node,
      result = excluded.result, error = excluded.error, output_tail = excluded.output_tail,
      anomaly = excluded.anomaly, run_by = excluded.run_by
    WHERE bext_runs.attempts = 0 AND excluded.attempts > 0
  RETURNING 1)
SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM del), (SELECT count(*) FROM tr)`

	runColumns = `schedule, run_id, started_ns, tick_ns, duration_ns, fence, attempts, manual, node, result, error, output_tail,
  anomaly, run_by`

	runsSQL = `SELECT ` + runColumns + ` FROM bext_runs
WHERE namespace = $1::text AND schedule = $2::text
ORDER BY started_ns DESC, seq DESC LIMIT $3::bigint`

	// lastRunsSQL reads the newest run of each schedule with one index
	// probe per schedule (LATERAL ... LIMIT 1): DISTINCT ON would read
	// every stored run of them, up to 2×keep each.
	lastRunsSQL = `SELECT r.schedule, r.run_id, r.started_ns, r.tick_ns, r.duration_ns, r.fence, r.attempts, r.manual,
  r.node, r.result, r.error, r.output_tail, r.anomaly, r.run_by
FROM (SELECT DISTINCT s FROM unnest($2::text[]) AS s) AS q,
LATERAL (SELECT * FROM bext_runs WHERE namespace = $1::text AND schedule = q.s
  ORDER BY started_ns DESC, seq DESC LIMIT 1) AS r`

	// announceSQL records a node until ttl from now on the database clock,
	// and forgets the namespace's nodes that expired (another row than
	// this node's, so no row is modified twice).
	announceSQL = `WITH c AS MATERIALIZED (SELECT clock_timestamp() AS ts),
gone AS (
  DELETE FROM bext_nodes WHERE namespace = $1::text AND node_id <> $2::text
    AND expires_at <= (SELECT ts FROM c)
  RETURNING 1),
up AS (
  INSERT INTO bext_nodes AS t (namespace, node_id, expires_at, last_seen, node)
  SELECT $1::text, $2::text, c.ts + $3::bigint * interval '1 microsecond', c.ts, $4::jsonb FROM c
  ON CONFLICT (namespace, node_id) DO UPDATE
    SET expires_at = excluded.expires_at, last_seen = excluded.last_seen, node = excluded.node
  RETURNING 1)
SELECT (SELECT count(*) FROM up), (SELECT count(*) FROM gone)`

	nodesSQL = `SELECT node_id, last_seen, node FROM bext_nodes
WHERE namespace = $1::text AND expires_at > clock_timestamp() ORDER BY node_id`

	leaveSQL = `DELETE FROM bext_nodes WHERE namespace = $1::text AND node_id = $2::text`

	// enqueueLockSQL serialises the Enqueues of backfills of the same
	// schedules (a transaction-level advisory lock per schedule queue, in
	// id order so two Enqueues never deadlock), and makes the transaction
	// durable: a request, once Enqueue returned, survives a crash.
	enqueueLockSQL = `SELECT set_config('synchronous_commit', 'on', true),
  (SELECT count(pg_advisory_xact_lock(x)) FROM (SELECT x FROM unnest($1::bigint[]) AS x ORDER BY x) AS o)`

	// enqueueSQL stores the requests in order, unless one of them is a
	// backfill of a schedule that has a backfill queued: then none, and it
	// names those schedules. It runs after enqueueLockSQL in the same
	// transaction, with a snapshot taken after that lock was granted, so it
	// sees a backfill that a concurrent Enqueue stored. It also forgets the
	// namespace's acceptances older than a day.
	//
	//	$1 namespace  $2 schedules  $3 ids  $4 backfill flags  $5 requests
	enqueueSQL = `WITH q AS MATERIALIZED (
  SELECT * FROM unnest($2::text[], $3::text[], $4::boolean[], $5::jsonb[]) WITH ORDINALITY
    AS q(schedule, id, backfill, request, ord)),
busy AS MATERIALIZED (
  SELECT DISTINCT r.schedule FROM bext_requests r
  WHERE r.namespace = $1::text AND r.backfill
    AND r.schedule IN (SELECT schedule FROM q WHERE backfill)),
ins AS (
  INSERT INTO bext_requests (namespace, schedule, id, backfill, request)
  SELECT $1::text, q.schedule, q.id, q.backfill, q.request FROM q
  WHERE NOT EXISTS (SELECT 1 FROM busy)
  ORDER BY q.ord
  ON CONFLICT (namespace, id) DO NOTHING
  RETURNING 1),
old AS (
  DELETE FROM bext_accepted WHERE namespace = $1::text AND accepted_at < clock_timestamp() - interval '1 day'
  RETURNING 1)
SELECT coalesce((SELECT array_agg(schedule ORDER BY schedule) FROM busy), '{}'),
  (SELECT count(*) FROM ins), (SELECT count(*) FROM old)`

	// queuedSQL: the schedules with requests queued, or with a trigger
	// taken and not heard back yet (bext_taken), which goes back to its
	// queue at the next take that finds the lock free.
	queuedSQL = `SELECT schedule FROM bext_requests WHERE namespace = $1::text
UNION SELECT schedule FROM bext_taken WHERE namespace = $1::text ORDER BY schedule`

	requestsSQL = `SELECT request FROM bext_requests WHERE namespace = $1::text AND schedule = $2::text ORDER BY seq`

	// doneSQL removes a finished backfill tick from its queue, wherever it
	// is (a trigger put back at the head while it ran must not keep it
	// queued; a second Done of it finds nothing), durably (a lost removal
	// would hand the tick to another node again).
	doneSQL = `WITH c AS MATERIALIZED (SELECT set_config('synchronous_commit', 'on', true) AS sc)
DELETE FROM bext_requests WHERE namespace = $1::text AND schedule = $2::text AND id = $3::text
  AND backfill AND (SELECT sc FROM c) IS NOT NULL`

	acceptedSQL = `SELECT node FROM bext_accepted WHERE namespace = $1::text AND schedule = $2::text AND id = $3::text`

	// takeRequestSQL is TakeRequest in one statement and one round trip,
	// on the session that keeps the lock:
	//
	//	$1 lock id (the schedule's, as TryLock)  $2 namespace
	//	$3 schedule  $4 holder  $5 node  $6 the take's token ('': none)
	//	$7 how long its record is kept (µs)
	//
	// q: the queue's head in the statement's snapshot, returned with a
	// contended answer. c: whether the queue has anything: an empty queue
	// takes no lock. l: the advisory lock. h: the head,
	// read only once the lock is held, FOR UPDATE: a row that another
	// node's statement deleted after this statement's snapshot (a trigger
	// it took, a backfill tick it finished) is skipped, as READ COMMITTED
	// re-checks a row it locks, so what the lock's previous holder removed
	// before releasing is never taken again. del: a trigger leaves the
	// queue here; a backfill tick stays until Done. tk: what was taken
	// (read from del's RETURNING). a: the acceptance. f: the fence, as
	// tryLockSQL draws it. un: the lock is given back, in the same
	// statement, when nothing was taken (an empty queue at the lock's
	// time). rec: a taken trigger's record under the take's token, for its
	// resends (takeResendSQL).
	//
	// Triggers taken and never heard back: c counts the schedule's
	// bext_taken rows (pend) as queued. p: those rows, once the lock is
	// held: the lock was free, so each take's lock ended with no renewal
	// from its taker (which deletes the row), and its taker never started
	// the trigger (the scheduler renews a manual run's lock before the run
	// starts). The head h is then the oldest (by seq, the queue's order)
	// of the queue's head (h0) and p's triggers; the other triggers of p
	// go back to the queue at their own seq (rq), and every row of p is
	// dropped (pd), but for this take's own token when it took something
	// (rec updates that row).
	//
	// The statement commits with synchronous_commit = on: a trigger taken
	// must not come back after a crash and run twice.
	takeRequestSQL = `WITH q AS MATERIALIZED (
  SELECT request FROM bext_requests WHERE namespace = $2::text AND schedule = $3::text ORDER BY seq LIMIT 1),
c AS MATERIALIZED (
  SELECT set_config('synchronous_commit', 'on', true) AS sc, EXISTS (SELECT 1 FROM q)
    OR EXISTS (SELECT 1 FROM bext_taken WHERE namespace = $2::text AND schedule = $3::text) AS queued),
l AS MATERIALIZED (
  SELECT c.queued, CASE WHEN c.queued THEN pg_try_advisory_lock($1::bigint) ELSE false END AS ok FROM c),
p AS MATERIALIZED (
  SELECT t.token, t.seq, t.id, t.request FROM bext_taken t
  WHERE (SELECT ok FROM l) AND t.namespace = $2::text AND t.schedule = $3::text
  FOR UPDATE),
h0 AS MATERIALIZED (
  SELECT r.seq, r.id, r.backfill, r.request FROM bext_requests r
  WHERE (SELECT ok FROM l) AND r.namespace = $2::text AND r.schedule = $3::text
  ORDER BY r.seq LIMIT 1 FOR UPDATE),
h AS MATERIALIZED (
  SELECT x.* FROM (
    SELECT h0.seq, h0.id, h0.backfill, h0.request, false AS back FROM h0
    UNION ALL SELECT p.seq, p.id, false, p.request, true FROM p) x
  ORDER BY x.seq, x.back LIMIT 1),
del AS (
  DELETE FROM bext_requests r USING h
  WHERE NOT h.backfill AND NOT h.back AND r.namespace = $2::text AND r.schedule = $3::text AND r.seq = h.seq
  RETURNING r.seq),
tk AS MATERIALIZED (
  SELECT h.seq, h.id, h.backfill, h.request FROM h WHERE h.backfill OR h.back OR h.seq IN (SELECT seq FROM del)),
rq AS (
  INSERT INTO bext_requests (namespace, schedule, seq, id, backfill, request) OVERRIDING SYSTEM VALUE
  SELECT $2::text, $3::text, p.seq, p.id, false, p.request FROM p
  WHERE NOT EXISTS (SELECT 1 FROM h WHERE h.back AND h.seq = p.seq AND h.id = p.id)
  ON CONFLICT DO NOTHING
  RETURNING 1),
pd AS (
  DELETE FROM bext_taken t USING p
  WHERE t.namespace = $2::text AND t.schedule = $3::text AND t.token = p.token
    AND NOT (t.token = $6::text AND $6::text <> '' AND EXISTS (SELECT 1 FROM tk WHERE NOT tk.backfill))
  RETURNING 1),
a AS (
  INSERT INTO bext_accepted AS x (namespace, schedule, id, node, accepted_at)
  SELECT $2::text, $3::text, tk.id, $5::text, clock_timestamp() FROM tk
  ON CONFLICT (namespace, schedule, id) DO UPDATE SET node = excluded.node, accepted_at = excluded.accepted_at
  RETURNING 1),
f AS (
  INSERT INTO bext_lock_fences AS t (namespace, key, fence, holder, acquired_at)
  SELECT $2::text, $3::text, greatest(1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint), $4::text, now()
  FROM tk
  ON CONFLICT (namespace, key) DO UPDATE
    SET fence = greatest(t.fence + 1, excluded.fence), holder = excluded.holder, acquired_at = excluded.acquired_at
  RETURNING t.fence),
rec AS (
  INSERT INTO bext_taken AS x (namespace, schedule, token, seq, id, request, fence, until)
  SELECT $2::text, $3::text, $6::text, tk.seq, tk.id, tk.request, (SELECT fence FROM f),
    clock_timestamp() + $7::bigint * interval '1 microsecond'
  FROM tk WHERE $6::text <> '' AND NOT tk.backfill
  ON CONFLICT (namespace, schedule, token) DO UPDATE
    SET seq = excluded.seq, id = excluded.id, request = excluded.request, fence = excluded.fence, until = excluded.until
  RETURNING 1),
un AS MATERIALIZED (
  SELECT CASE WHEN l.ok AND NOT EXISTS (SELECT 1 FROM tk) THEN pg_advisory_unlock($1::bigint) END AS unlocked FROM l)
SELECT l.queued, l.ok, un.unlocked, tk.request, (SELECT fence FROM f), (SELECT count(*) FROM a),
  pg_backend_pid(), current_setting('synchronous_commit'), (SELECT request FROM q)
FROM l CROSS JOIN un LEFT JOIN tk ON true`

	// takeResendSQL answers a take whose token has a live record in
	// bext_taken (a trigger taken by it), before takeRequestSQL, which
	// runs only when it answers none. On the session that keeps the lock:
	//
	//	$1 lock id  $2 namespace  $3 schedule  $4 holder  $5 node
	//	$6 token  $7 how long the record is kept (µs)
	//
	// r: the record, locked: heard (bext_taken_heard, rh) before not
	// (bext_taken, r0). l: the advisory lock, tried only for a record not
	// heard. v: what is done: none (no record: a fresh take);
	// heard (its taker renewed or released the take's lock, so it has its
	// answer: a late copy, or the token reused; nothing is taken and the
	// row is left for the take's give-back, which a fresh take's ON
	// CONFLICT would overwrite with another trigger); retake (the
	// lock was free: the take's lock ended before its taker heard, and only
	// this record holds the trigger: the lock is taken again, with a new
	// fence, the record kept anew); held (the lock is held and the key's
	// latest fence is still the record's: nobody took it since, so the
	// take's own session holds it, which the server has not dropped yet:
	// the caller resends); requeue (another took the lock since: the
	// trigger goes back to its queue at its own place, seq, and the record
	// is dropped). It commits durably, as takeRequestSQL.
	takeResendSQL = `WITH c AS MATERIALIZED (SELECT set_config('synchronous_commit', 'on', true) AS sc),
rh AS MATERIALIZED (
  SELECT t.seq, t.id, t.request, t.fence, true AS heard FROM bext_taken_heard t
  WHERE t.namespace = $2::text AND t.schedule = $3::text AND t.token = $6::text
    AND t.until > clock_timestamp() AND (SELECT sc FROM c) IS NOT NULL
  FOR UPDATE),
r0 AS MATERIALIZED (
  SELECT t.seq, t.id, t.request, t.fence, false AS heard FROM bext_taken t
  WHERE t.namespace = $2::text AND t.schedule = $3::text AND t.token = $6::text
    AND t.until > clock_timestamp() AND (SELECT sc FROM c) IS NOT NULL
  FOR UPDATE),
r AS MATERIALIZED (
  SELECT * FROM rh UNION ALL SELECT * FROM r0 WHERE NOT EXISTS (SELECT 1 FROM rh)),
l AS MATERIALIZED (
  SELECT CASE WHEN EXISTS (SELECT 1 FROM r WHERE NOT r.heard) THEN pg_try_advisory_lock($1::bigint) ELSE false END AS ok),
v AS MATERIALIZED (
  SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM r) THEN 'none'
    WHEN (SELECT heard FROM r) THEN 'heard'
    WHEN (SELECT ok FROM l) THEN 'retake'
    WHEN (SELECT fence FROM bext_lock_fences WHERE namespace = $2::text AND key = $3::text) = (SELECT fence FROM r) THEN 'held'
    ELSE 'requeue' END AS v),
f AS (
  INSERT INTO bext_lock_fences AS t (namespace, key, fence, holder, acquired_at)
  SELECT $2::text, $3::text, greatest(1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint), $4::text, now()
  FROM v WHERE v.v = 'retake'
  ON CONFLICT (namespace, key) DO UPDATE
    SET fence = greatest(t.fence + 1, excluded.fence), holder = excluded.holder, acquired_at = excluded.acquired_at
  RETURNING t.fence),
up AS (
  UPDATE bext_taken t SET fence = (SELECT fence FROM f), until = clock_timestamp() + $7::bigint * interval '1 microsecond'
  WHERE t.namespace = $2::text AND t.schedule = $3::text AND t.token = $6::text AND (SELECT v FROM v) = 'retake'
  RETURNING 1),
a AS (
  INSERT INTO bext_accepted AS x (namespace, schedule, id, node, accepted_at)
  SELECT $2::text, $3::text, r.id, $5::text, clock_timestamp() FROM r WHERE (SELECT v FROM v) = 'retake'
  ON CONFLICT (namespace, schedule, id) DO UPDATE SET node = excluded.node, accepted_at = excluded.accepted_at
  RETURNING 1),
rq AS (
  INSERT INTO bext_requests (namespace, schedule, seq, id, backfill, request) OVERRIDING SYSTEM VALUE
  SELECT $2::text, $3::text, r.seq, r.id, false, r.request FROM r WHERE (SELECT v FROM v) = 'requeue'
  ON CONFLICT DO NOTHING
  RETURNING 1),
dl AS (
  DELETE FROM bext_taken t
  WHERE t.namespace = $2::text AND t.schedule = $3::text AND t.token = $6::text AND (SELECT v FROM v) = 'requeue'
  RETURNING 1)
SELECT v.v, (SELECT request FROM r), (SELECT fence FROM f), (SELECT count(*) FROM up), (SELECT count(*) FROM a),
  (SELECT count(*) FROM rq) + (SELECT count(*) FROM dl), pg_backend_pid(), current_setting('synchronous_commit')
FROM v`

	// giveBackSQL is GiveBack's step on the cluster state, on any session:
	// the take's row, heard (bext_taken_heard) or not (bext_taken), is
	// dropped and its trigger goes back to its queue at its own place
	// (seq; not twice: the request id is unique), in one statement that
	// commits durably. No row (given
	// back already, put back by a take that found the lock free, or
	// swept): nothing. The lock is released after it, on its own session.
	//
	//	$1 namespace  $2 schedule  $3 the take's token
	giveBackSQL = `WITH c AS MATERIALIZED (SELECT set_config('synchronous_commit', 'on', true) AS sc),
d0 AS (
  DELETE FROM bext_taken t
  WHERE t.namespace = $1::text AND t.schedule = $2::text AND t.token = $3::text AND (SELECT sc FROM c) IS NOT NULL
  RETURNING t.seq, t.id, t.request),
d1 AS (
  DELETE FROM bext_taken_heard t
  WHERE t.namespace = $1::text AND t.schedule = $2::text AND t.token = $3::text AND (SELECT sc FROM c) IS NOT NULL
  RETURNING t.seq, t.id, t.request),
d AS (SELECT * FROM d0 UNION ALL SELECT * FROM d1),
rq AS (
  INSERT INTO bext_requests (namespace, schedule, seq, id, backfill, request) OVERRIDING SYSTEM VALUE
  SELECT $1::text, $2::text, d.seq, d.id, false, d.request FROM d
  ON CONFLICT DO NOTHING
  RETURNING 1)
SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM rq), current_setting('synchronous_commit')`

	// headSQL reads a queue's head, for a TakeRequest answered contended
	// without asking for the lock.
	headSQL = `SELECT request FROM bext_requests WHERE namespace = $1::text AND schedule = $2::text ORDER BY seq LIMIT 1`

	// heldSQL: is the advisory lock with this id granted to anyone in this
	// database (pg_locks shows a bigint advisory lock as classid/objid with
	// objsubid 1).
	heldSQL = `SELECT EXISTS (
  SELECT 1 FROM pg_locks
  WHERE locktype = 'advisory' AND granted AND objsubid = 1
    AND classid::bigint = $1::bigint AND objid::bigint = $2::bigint
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`
)
