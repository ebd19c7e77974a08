package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/node"
)

// BEXT_LAST_SUCCESS_TICK_TIME comes from the cluster's history: on a real
// Redis and a real Postgres, node-a runs a triggered run that succeeds;
// node-b, which never ran the schedule, then runs the next one, and its
// job is told node-a's success (not nothing, which is all node-b saw).
func TestLastSuccessTickTimeFromTheClusterHistory(t *testing.T) {
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			conf := func(nodeID string) string {
				return fmt.Sprintf(`node_id = %q
[http]
listen = "off"
%s
[[scheduled]]
id = "ls"
cron = "0 0 1 1 *"
hint = "require_global"
command = ["/bin/sh", "-c", "echo \"$BEXT_NODE_ID $BEXT_LAST_SUCCESS_TICK_TIME\" >> %s"]
`, nodeID, lockingTOML, out)
			}
			// runOn starts a node, has it run one triggered run to its
			// success record, and stops it.
			runOn := func(nodeID, reqID string) cluster.Run {
				t.Helper()
				ctx, cancel := context.WithCancel(context.Background())
				n, err := node.New(ctx, parse(t, conf(nodeID)), node.Options{Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- n.Run(ctx) }()
				defer func() {
					cancel()
					if err := <-done; err != nil {
						t.Error(err)
					}
				}()
				<-n.Ready()
				if err := st.Enqueue(ctx, []cluster.Request{{ID: reqID, Schedule: "ls", Tick: time.Now(), By: "test", At: time.Now()}}); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(30 * time.Second)
				for {
					runs, err := st.Runs(ctx, "ls", 1)
					if err == nil && len(runs) == 1 && runs[0].RunID == reqID && runs[0].Result == "success" {
						if runs[0].Node != nodeID {
							t.Fatalf("run %s on %s, want %s", reqID, runs[0].Node, nodeID)
						}
						return runs[0]
					}
					if time.Now().After(deadline) {
						t.Fatalf("no success of %s on %s in history after 30s: %+v (%v)", reqID, nodeID, runs, err)
					}
					time.Sleep(20 * time.Millisecond) // history is polled: nothing tells of a record
				}
			}
			first := runOn("node-a", "trigger-a")
			runOn("node-b", "trigger-b")
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) != 2 {
				t.Fatalf("job output %q, want a line per run", b)
			}
			if lines[0] != "node-a " {
				t.Errorf("node-a's run (the schedule's first) was told %q, want no last success", lines[0])
			}
			got, ok := strings.CutPrefix(lines[1], "node-b ")
			at, err := time.Parse(time.RFC3339, got)
			// The variable is RFC 3339 to the second.
			if !ok || err != nil || !at.Equal(first.Tick.Truncate(time.Second)) {
				t.Errorf("node-b's run was told %q, want node-a's success at %s", lines[1], first.Tick.Format(time.RFC3339Nano))
			}
		})
	}
}
