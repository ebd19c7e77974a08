package pg

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	store "github.com/bext-dev/bext-scheduler/cluster"
)

// TestRunsTableGainsAnomalyAndBy: a bext_runs made before its anomaly and
// run_by columns is migrated in place by the first Locker that records a
// run (the "tables exist" check sees the columns missing), rows of older
// versions read back with neither, and an older node's insert, which names
// only the columns it knows, still works after the migration. Once
// migrated, a role that may not ALTER or CREATE records and reads runs.
func TestRunsTableGainsAnomalyAndBy(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	schema := c.ns + "_oldruns"
	role := c.ns + "_rw"
	c.exec(`CREATE SCHEMA ` + schema)
	t.Cleanup(func() { c.exec(`DROP SCHEMA ` + schema + ` CASCADE`) })
	const alter = `ALTER TABLE bext_runs ADD COLUMN IF NOT EXISTS anomaly text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS run_by text NOT NULL DEFAULT '';
`
	old := strings.Replace(createClusterSQL, alter, "", 1)
	if old == createClusterSQL {
		t.Fatalf("createClusterSQL no longer has %q as this test expects: update the test", alter)
	}
	c.exec(`SET search_path = ` + schema + `; ` + old + ` RESET search_path`)
	// What a node of an older version inserts.
	oldInsert := func(id string, started time.Time) {
		t.Helper()
		c.exec(`INSERT INTO ` + schema + `.bext_runs (namespace, schedule, run_id, started_ns, tick_ns, duration_ns,
  fence, attempts, manual, node, result, error, output_tail)
VALUES ('` + c.ns + `', 'job', '` + id + `', ` + strconv.FormatInt(started.UnixNano(), 10) + `, ` + strconv.FormatInt(started.UnixNano(), 10) +
			`, 1000, 1, 1, false, 'old-node', 'success', '', '')`)
	}
	base := c.dbNow().Truncate(time.Microsecond)
	oldInsert("old-1", base)

	withPath := func(user string) string {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			u.User = url.User(user)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	l := c.open(Options{URL: withPath("")})
	newRun := func(id string, sec int, anomaly, by string) store.Run {
		at := base.Add(time.Duration(sec) * time.Second)
		return store.Run{Schedule: "job", RunID: id, Tick: at, StartedAt: at, Node: "new-node", Result: "success",
			Attempts: 1, Duration: time.Second, Anomaly: anomaly, By: by}
	}
	if err := l.RecordRuns(ctx, []store.Run{newRun("new-2", 2, store.AnomalyOverrun, "alice@host")}, 100); err != nil {
		t.Fatalf("RecordRuns on a table made before anomaly and run_by: %v", err)
	}
	oldInsert("old-3", base.Add(3*time.Second))

	// A role with every right on the rows but none on the tables' shape.
	c.exec(`CREATE ROLE ` + role + ` LOGIN;
GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role + `;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + role + `;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA ` + schema + ` TO ` + role)
	// Registered after the schema's cleanup, so run before it.
	t.Cleanup(func() { c.exec(`DROP OWNED BY ` + role + `; DROP ROLE ` + role) })
	lr := c.open(Options{URL: withPath(role)})
	if err := lr.RecordRuns(ctx, []store.Run{newRun("new-4", 4, store.AnomalyTooFast, "")}, 100); err != nil {
		t.Fatalf("RecordRuns as a role without ALTER, the table migrated: %v", err)
	}
	runs, err := lr.Runs(ctx, "job", 10)
	if err != nil {
		t.Fatalf("Runs as a role without ALTER: %v", err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.RunID+":"+r.Anomaly+":"+r.By)
	}
	want := []string{"new-4:too_fast:", "old-3::", "new-2:overrun:alice@host", "old-1::"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("runs (id:anomaly:by) = %v, want %v", got, want)
	}
}
