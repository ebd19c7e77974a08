package pg

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	store "github.com/bext-dev/bext-scheduler/cluster"
)

// The trim of one schedule's run history reads that schedule's runs, not
// the namespace's: on a table analyzed while small (a young install),
// Postgres planned the join of the trimmed schedules and bext_runs as a
// scan of every run of the namespace filtered on the schedule, so each
// trim cost the whole fleet's history (6,603 rows read here for 22).
func TestRunTrimReadsOnlyItsSchedule(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()
	const keep, schedules = 20, 300
	threshold := int(trimThreshold(keep))
	c.exec(`ANALYZE bext_runs`)
	c.exec(`ANALYZE bext_run_counts`)
	// Every schedule at the threshold: the next run of any one trims it.
	for i := range threshold {
		runs := make([]store.Run, schedules)
		for s := range runs {
			runs[s] = testRun(fmt.Sprintf("s%03d", s), i)
		}
		if err := l.RecordRuns(ctx, runs, keep); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// RecordRuns plans each call on its parameters (QueryExecModeExec):
	// explain's are written in, as a custom plan.
	plan := explain(t, tx, recordRunsSQL, recordRunsArgs(c.ns, keep, []store.Run{testRun("s000", 1000)})...)
	scan := regexp.MustCompile(`Scan .*on bext_runs .*\(actual rows=(\d+) loops=(\d+)\)`)
	read := 0
	for _, line := range plan {
		if m := scan.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			loops, _ := strconv.Atoi(m[2])
			read += n * loops
		}
	}
	// The trimmed schedule's stored runs, and the few rows the trim
	// deletes by ctid.
	if read == 0 || read > 2*threshold {
		t.Fatalf("the trim of one schedule read %d rows of bext_runs (it has %d, the namespace %d):\n%s",
			read, threshold, threshold*schedules, strings.Join(plan, "\n"))
	}
}
