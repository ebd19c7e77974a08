package pg

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	store "github.com/bext-dev/bext-scheduler/cluster"
)

// A node of the version before GiveBack (21e95d1) beside one of this
// version, on the same tables: the old node reads every bext_taken row as
// a take not heard back (its take puts the row's trigger back, or takes it
// itself when the lock is free). These are that version's statements, as
// they were; the test runs them as the old node would.

const oldQueuedSQL = `SELECT schedule FROM bext_requests WHERE namespace = $1::text
UNION SELECT schedule FROM bext_taken WHERE namespace = $1::text ORDER BY schedule`

const oldTakeRequestSQL = `WITH q AS MATERIALIZED (
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

// oldTake runs the old node's take of schedule on its own session conn;
// it returns the request taken (nil: none) and whether the lock was left
// held, which it then releases.
func oldTake(t *testing.T, c *cluster, conn *pgx.Conn, schedule, token string) (*store.Request, bool) {
	t.Helper()
	ctx := context.Background()
	var (
		queued, ok bool
		unlocked   *bool
		doc, head  []byte
		fence      *int64
		accepted   int64
		pid        uint32
		syncCommit string
	)
	id := lockID(c.ns, schedule)
	keep := (2 * time.Minute).Microseconds()
	if err := conn.QueryRow(ctx, oldTakeRequestSQL, id, c.ns, schedule, "old", "node-old", token, keep).
		Scan(&queued, &ok, &unlocked, &doc, &fence, &accepted, &pid, &syncCommit, &head); err != nil {
		t.Fatalf("the old take: %v", err)
	}
	held := ok && (unlocked == nil || !*unlocked)
	if held {
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, id); err != nil {
			t.Fatal(err)
		}
	}
	if doc == nil {
		return nil, held
	}
	var req store.Request
	if err := json.Unmarshal(doc, &req); err != nil {
		t.Fatal(err)
	}
	return &req, held
}

func oldQueued(t *testing.T, c *cluster, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), oldQueuedSQL, c.ns)
	if err != nil {
		t.Fatal(err)
	}
	s, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A trigger a new node took, heard (its confirming renewal) and released
// once run is not taken again by an old node: the new node's record of the
// heard take, kept for a give-back, is nothing the old node reads.
func TestMixedVersionsHeardTakeNotRetaken(t *testing.T) {
	c := newCluster(t)
	a := c.open(Options{Holder: "a"})
	ctx := context.Background()
	old, err := pgx.Connect(ctx, c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(ctx)

	if err := a.Enqueue(ctx, []store.Request{trigger("t1", "s")}); err != nil {
		t.Fatal(err)
	}
	tk, err := a.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "node-a", TTL: time.Minute, Token: "tok-a"})
	if err != nil || tk.Handle == nil || tk.Request == nil || tk.Request.ID != "t1" {
		t.Fatalf("TakeRequest = %+v, %v; want t1", tk, err)
	}
	if err := a.Renew(ctx, tk.Handle); err != nil {
		t.Fatalf("Renew (the take heard) = %v", err)
	}
	if err := a.Release(ctx, tk.Handle); err != nil {
		t.Fatalf("Release (t1 ran) = %v", err)
	}
	if q := oldQueued(t, c, old); len(q) != 0 {
		t.Errorf("the old node's Queued after t1 ran = %v, want none", q)
	}
	if req, held := oldTake(t, c, old, "s", "tok-old"); req != nil || held {
		t.Errorf("the old node's take after t1 ran = %+v (lock left held %v), want nothing: t1 would run twice", req, held)
	}

	// A take never heard (its session died before the renewal) is still
	// one the old node puts back and runs.
	if err := a.Enqueue(ctx, []store.Request{trigger("t2", "s")}); err != nil {
		t.Fatal(err)
	}
	tk, err = a.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "node-a", TTL: time.Minute, Token: "tok-a2"})
	if err != nil || tk.Handle == nil || tk.Request == nil || tk.Request.ID != "t2" {
		t.Fatalf("TakeRequest = %+v, %v; want t2", tk, err)
	}
	c.kill("s")
	if q := oldQueued(t, c, old); len(q) != 1 || q[0] != "s" {
		t.Errorf("the old node's Queued with t2 never heard = %v, want [s]", q)
	}
	if req, held := oldTake(t, c, old, "s", "tok-old2"); req == nil || req.ID != "t2" || !held {
		t.Errorf("the old node's take of t2 never heard = %+v (held %v), want t2", req, held)
	}
}
