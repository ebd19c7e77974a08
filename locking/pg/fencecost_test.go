package pg

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/locking"
)

// BenchmarkFenceWrite measures what the fence row write costs a plain
// TryLock, and what a lower fillfactor does to it: the bare advisory lock
// (lock, unlock), then tryLockSQL (lock and fence upsert) on a table of
// fillfactor 100 (the default) and 70, each in a schema of its own, op by
// op in turn on one connection each. Reported per variant: ns per
// lock+unlock, and the share of the fence updates that were HOT (no index
// entry: the new row version stays on its page).
func BenchmarkFenceWrite(b *testing.B) {
	c := newCluster(b)
	ctx := context.Background()
	type variant struct {
		name string
		ff   int // 0: no fence write
		conn *pgx.Conn
		ns   int64
	}
	vs := []*variant{{name: "bare"}, {name: "fence_ff100", ff: 100}, {name: "fence_ff70", ff: 70}}
	for _, v := range vs {
		conn, err := pgx.Connect(ctx, c.url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close(context.Background()) })
		v.conn = conn
		// Our sessions' settings (configureSessions).
		if _, err := conn.Exec(ctx, `SET synchronous_commit = off; SET jit = off; SET plan_cache_mode = force_generic_plan`); err != nil {
			b.Fatal(err)
		}
		if v.ff == 0 {
			continue
		}
		schema := fmt.Sprintf("%s_ff%d", c.ns, v.ff)
		c.exec(`CREATE SCHEMA ` + schema)
		b.Cleanup(func() { c.exec(`DROP SCHEMA ` + schema + ` CASCADE`) })
		for _, q := range []string{`SET search_path = ` + schema, createTableSQL,
			fmt.Sprintf(`ALTER TABLE bext_lock_fences SET (fillfactor = %d)`, v.ff)} {
			if _, err := conn.Exec(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
	}
	op := func(v *variant, key string) {
		id := lockID(c.ns, key)
		var ok bool
		var err error
		if v.ff == 0 {
			err = v.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, id).Scan(&ok)
		} else {
			err = v.conn.QueryRow(ctx, tryLockSQL, id, c.ns, key, "bench").Scan(&ok, new(*int64), new(uint32))
		}
		if err != nil || !ok {
			b.Fatalf("%s: lock %q: %v %v", v.name, key, ok, err)
		}
		if err := v.conn.QueryRow(ctx, releaseSQL, id).Scan(&ok); err != nil || !ok {
			b.Fatalf("%s: unlock %q: %v %v", v.name, key, ok, err)
		}
	}
	for i := 0; b.Loop(); i++ {
		key := fmt.Sprintf("k%d", i%64)
		for k := range vs {
			v := vs[(i+k)%len(vs)]
			start := time.Now()
			op(v, key)
			v.ns += int64(time.Since(start))
		}
	}
	b.StopTimer()
	for _, v := range vs {
		b.ReportMetric(float64(v.ns)/float64(b.N), v.name+"-ns/op")
		if v.ff == 0 {
			continue
		}
		// This connection's counters reach the view once flushed, which
		// the end of the next transaction does when asked to.
		var upd, hot int64
		if _, err := v.conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			b.Fatal(err)
		}
		if err := v.conn.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
WHERE relid = 'bext_lock_fences'::regclass`).Scan(&upd, &hot); err != nil {
			b.Fatal(err)
		}
		if upd > 0 {
			b.ReportMetric(100*float64(hot)/float64(upd), v.name+"-hot%")
		}
	}
}

// BenchmarkMarkBatch measures what batching a burst's marks saves: 100
// ticks granted by 100 TryLockTicks (each its own transaction, each
// waiting for its WAL flush: synchronous_commit on) against one
// TryLockTicks of 100 (one transaction, one flush). Reported per variant:
// ns per tick and WAL bytes per tick.
func BenchmarkMarkBatch(b *testing.B) {
	c := newCluster(b)
	ctx := context.Background()
	l := c.openFor(b, Options{})
	const n = 100
	run, round := time.Now().UnixNano(), 0 // keys unique to this run
	batch := func() []locking.TickRequest {
		round++
		now := c.dbNow()
		reqs := make([]locking.TickRequest, n)
		for i := range reqs {
			// A missing mark counts as now - MaxSkew: an hour keeps T
			// grantable however slow the machine is.
			reqs[i] = locking.TickRequest{Key: fmt.Sprintf("%d/%d/%d", run, round, i), Tick: now,
				TTL: time.Minute, MaxSkew: time.Hour, Window: time.Hour}
		}
		return reqs
	}
	wal := func() (lsn string) {
		if err := c.admin.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return lsn
	}
	var walBytes, ns [2]float64
	for i := 0; b.Loop(); i++ {
		for k := range 2 {
			one := (i+k)%2 == 0
			reqs := batch()
			lsn0 := wal()
			start := time.Now()
			var answers []locking.TickAnswer
			if one {
				for _, r := range reqs {
					ans, err := l.TryLockTick(ctx, r)
					if err != nil || ans.Verdict != locking.TickGranted {
						b.Fatal(r.Key, r.Tick, ans.Verdict, ans.Mark, ans.Now, err)
					}
					answers = append(answers, ans)
				}
			} else {
				var errs []error
				answers, errs = l.TryLockTicks(ctx, reqs)
				for j := range errs {
					if errs[j] != nil || answers[j].Verdict != locking.TickGranted {
						b.Fatal(answers[j].Verdict, errs[j])
					}
				}
			}
			d := time.Since(start)
			lsn1 := wal()
			var diff float64
			if err := c.admin.QueryRow(ctx, `SELECT $1::pg_lsn - $2::pg_lsn`, lsn1, lsn0).Scan(&diff); err != nil {
				b.Fatal(err)
			}
			j := 0
			if !one {
				j = 1
			}
			ns[j] += float64(d)
			walBytes[j] += diff
			for _, a := range answers {
				if err := l.Release(ctx, a.Handle); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for j, name := range []string{"single", "batched"} {
		b.ReportMetric(ns[j]/float64(b.N*n), name+"-ns/tick")
		b.ReportMetric(walBytes[j]/float64(b.N*n), name+"-walB/tick")
	}
}
