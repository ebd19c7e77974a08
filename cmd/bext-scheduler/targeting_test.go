package main

import (
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
)

const targetSchedules = `
[[scheduled]]
id = "db"
cron = "*/1 * * * * *"
hint = "require_global"
expected_runtime = "3s"
nodes = ["role=db"]
command = ["/bin/sh", "-c", '@JOB@']
[[scheduled]]
id = "local"
cron = "*/1 * * * * *"
hint = "node_local"
expected_runtime = "3s"
nodes = ["role=db", "zone=a"]
command = ["/bin/sh", "-c", '@JOB@']
[[scheduled]]
id = "any"
cron = "*/1 * * * * *"
hint = "node_local"
expected_runtime = "3s"
command = ["/bin/sh", "-c", '@JOB@']
`

// TestClusterNodeTargeting: with the real binary on each backend, a
// schedule targeted at role=db runs only on the node started with
// --tag role=db (require_global and node_local alike), an untargeted one
// on both; status shows the nodes' tags and, once the tagged node has
// left, warns that no live node matches.
func TestClusterNodeTargeting(t *testing.T) {
	t.Parallel()
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			c := newOpsCluster(t, lockingTOML, st, targetSchedules)
			c.setSleep("0.1")
			db := c.start("node-db", "", "--tag", "role=db", "--tag", "zone=a")
			c.start("node-web", "", "--tag", "role=web")
			up := time.Now()
			waitFor(t, "db, local and any running", 30*time.Second, func() bool {
				return len(ticksAfter(c.jobRuns("db"), up)) >= 3 && len(ticksAfter(c.jobRuns("local"), up)) >= 3 &&
					len(nodesOf(ticksAfter(c.jobRuns("any"), up))) == 2
			})
			for _, s := range []string{"db", "local"} {
				for _, r := range c.jobRuns(s) {
					if r.Node != "node-db" {
						t.Errorf("%s ran on %s (tick %s): it targets nodes the node's tags do not match", s, r.Node, r.Tick.Format(time.RFC3339))
					}
				}
			}
			var st1 ops.Status
			if err := json.Unmarshal([]byte(c.cli(0, "status", "--json").Stdout), &st1); err != nil {
				t.Fatal(err)
			}
			tags := map[string][]string{}
			for _, n := range st1.Nodes {
				tags[n.NodeID] = n.Tags
			}
			if !slices.Equal(tags["node-db"], []string{"role=db", "zone=a"}) || !slices.Equal(tags["node-web"], []string{"role=web"}) {
				t.Errorf("status: node tags %q", tags)
			}
			for _, s := range st1.Schedules {
				if s.NoNode {
					t.Errorf("status: %s no_node while node-db is live", s.ID)
				}
			}

			// node-db leaves: nothing asks for db's ticks any more, and
			// status says so.
			db.p.Signal(syscall.SIGTERM)
			if code := db.p.Wait(30 * time.Second); code != 0 {
				t.Fatalf("node-db exited %d", code)
			}
			left := time.Now()
			waitFor(t, "status warning of no node for db and local", 30*time.Second, func() bool {
				out := c.cli(0, "status").Stdout
				return strings.Contains(out, "NO NODE: db: no live node has every tag of nodes = [role=db]") &&
					strings.Contains(out, "NO NODE: local:") && !strings.Contains(out, "NO NODE: any")
			})
			if late := ticksAfter(c.jobRuns("db"), left); len(late) > 0 {
				t.Errorf("db ran after node-db left: %+v", late)
			}
		})
	}
}

// A bad --tag is a usage error (exit 2) naming the flag, before anything
// starts.
func TestRunRejectsBadTag(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, t.TempDir(), "b.toml", "[[scheduled]]\nid = \"a\"\ncron = \"@daily\"\ncommand = [\"true\"]\n")
	for _, bad := range []string{"", "role=db,zone=a", "role db"} {
		r := cli(t, cfg, 2, "run", "--tag", bad)
		if !strings.Contains(r.Stderr, "--tag") {
			t.Errorf("--tag %q: stderr %q does not name the flag", bad, r.Stderr)
		}
	}
}
