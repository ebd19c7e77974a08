package pg

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	store "github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// BenchmarkClusterHistorySize measures what full histories cost Postgres:
// 1,000 schedules recorded by one node in batches of 64 with keep 100 and
// a 4 KiB output tail per run: random text, which TOAST cannot compress
// (the worst case), or log-like lines, which it can (sub-benchmarks
// random and log). It records 110 runs per schedule (every history at the
// trim threshold, none trimmed yet), vacuums and measures bext_runs with
// its TOAST table and indexes; then 110 more each (ten trims per
// schedule), vacuuming after every 11 runs per schedule as autovacuum
// would at any realistic rate (a trim cycle of 1,000 schedules firing
// every minute lasts 11 minutes; autovacuum looks every minute), to show
// the size stays flat: the trim's dead rows are reused once vacuumed. It
// runs in a database of its own, dropped at the end. Run it once:
//
//	go test -run '^$' -bench ClusterHistorySize -benchtime 1x ./locking/pg/
func BenchmarkClusterHistorySize(b *testing.B) {
	b.Run("random", func(b *testing.B) { historySize(b, randomTails) })
	b.Run("log", func(b *testing.B) { historySize(b, logTails) })
}

// randomTails are 4 KiB of base64 of random bytes each.
func randomTails(rng *rand.ChaCha8) []string {
	tails := make([]string, 256)
	raw := make([]byte, store.MaxOutputTail*3/4)
	for i := range tails {
		_, _ = rng.Read(raw)
		tails[i] = base64.StdEncoding.EncodeToString(raw)
	}
	return tails
}

// logTails are 4 KiB of log lines each, varying in their numbers.
func logTails(rng *rand.ChaCha8) []string {
	r := rand.New(rng)
	tails := make([]string, 256)
	for i := range tails {
		var sb strings.Builder
		for sb.Len() < store.MaxOutputTail {
			fmt.Fprintf(&sb, "2026-01-01T00:%02d:%02d.%06dZ INFO sync: copied %d rows from shard %d in %dms (batch %x)\n",
				r.IntN(60), r.IntN(60), r.IntN(1e6), r.IntN(1e5), r.IntN(64), r.IntN(5000), r.Uint32())
		}
		tails[i] = sb.String()[:store.MaxOutputTail]
	}
	return tails
}

func historySize(b *testing.B, makeTails func(*rand.ChaCha8) []string) {
	const (
		schedules = 1000
		keep      = store.DefaultKeep
		perPhase  = 110
		cycle     = 11 // runs per schedule between two vacuums
		batchSize = 64
	)
	ctx := context.Background()
	base := testenv.PGURL(b)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close(ctx)
	db := fmt.Sprintf("bext_size_%d", time.Now().UnixNano()%1e12)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+db); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if _, err := admin.Exec(ctx, `DROP DATABASE `+db+` WITH (FORCE)`); err != nil {
			b.Errorf("dropping %s: %v", db, err)
		}
	}()
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" {
		b.Fatalf("BEXT_TEST_PG_URL must be a postgres:// URL here: %q", base)
	}
	u.Path = "/" + db
	l, err := Open(ctx, Options{URL: u.String(), Namespace: "size"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Close(ctx) }()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)

	tails := makeTails(rand.NewChaCha8([32]byte{1}))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var k int // runs recorded so far
	vacuum := func() {
		if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) bext_runs`); err != nil {
			b.Fatal(err)
		}
	}
	record := func(per int, vacuumEvery int) time.Duration {
		start := time.Now()
		batch := make([]store.Run, 0, batchSize)
		flush := func() {
			if err := l.RecordRuns(ctx, batch, keep); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
		for i := range per {
			if vacuumEvery > 0 && i > 0 && i%vacuumEvery == 0 {
				vacuum()
			}
			for s := range schedules {
				started := t0.Add(time.Duration(k) * time.Millisecond)
				batch = append(batch, store.Run{
					Schedule: fmt.Sprintf("schedule-%04d", s), Tick: started, Node: "node-1", Result: "failure",
					StartedAt: started, Duration: 1234 * time.Millisecond, Fence: started.UnixMicro(), Attempts: 1,
					Error: "exit status 1: connection refused", RunID: fmt.Sprintf("%032x", k),
					OutputTail: tails[k%len(tails)],
				})
				k++
				if len(batch) == batchSize {
					flush()
				}
			}
		}
		if len(batch) > 0 {
			flush()
		}
		return time.Since(start)
	}
	measure := func(phase string, took time.Duration) int64 {
		vacuum()
		var total, heap, toast, indexes, rows, minPer, maxPer int64
		err := conn.QueryRow(ctx, `SELECT pg_total_relation_size('bext_runs'), pg_relation_size('bext_runs'),
  coalesce(pg_total_relation_size(nullif(reltoastrelid, 0)), 0), pg_indexes_size('bext_runs'),
  (SELECT count(*) FROM bext_runs),
  (SELECT min(n) FROM (SELECT count(*) AS n FROM bext_runs GROUP BY schedule) c),
  (SELECT max(n) FROM (SELECT count(*) AS n FROM bext_runs GROUP BY schedule) c)
FROM pg_class WHERE oid = 'bext_runs'::regclass`).Scan(&total, &heap, &toast, &indexes, &rows, &minPer, &maxPer)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: %d runs recorded in %v; bext_runs total %d MiB (heap %d MiB, TOAST %d MiB, indexes %d MiB); %d rows, %d..%d per schedule, %d bytes per stored run",
			phase, k, took.Round(time.Millisecond), total>>20, heap>>20, toast>>20, indexes>>20, rows, minPer, maxPer, total/rows)
		if maxPer > trimThreshold(keep) {
			b.Errorf("%s: a history holds %d runs, over %d", phase, maxPer, trimThreshold(keep))
		}
		return total
	}
	took := record(perPhase, 0)
	first := measure("after 110 runs per schedule", took)
	took = record(perPhase, cycle)
	second := measure("after 220 runs per schedule", took)
	b.ReportMetric(float64(first)/(1<<20), "MiB@110")
	b.ReportMetric(float64(second)/(1<<20), "MiB@220")
	b.ReportMetric(float64(second)/schedules/1024, "KiB/schedule")
	for b.Loop() {
	}
}
