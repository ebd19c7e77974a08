package main

import (
	"encoding/json"
	"net/http"
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// Schedules of the stop and cancel tests: "long" runs only when
// triggered (its cron is yearly) and lasts as long as dir/sleep says.
const stopSchedules = `
[http]
token = "stop-test-token"

[[scheduled]]
id = "long"
cron = "0 0 1 1 *"
hint = "require_global"
expected_runtime = "2m"
retries = 2
retry_backoff = "1s"
command = ["/bin/sh", "-c", '@JOB@']

[[scheduled]]
id = "idle"
cron = "0 0 1 1 *"
hint = "require_global"
expected_runtime = "1s"
command = ["/bin/sh", "-c", '@JOB@']
`

// statusOf runs the CLI's status --json against the cluster's backend.
func (c *opsCluster) statusOf() ops.Status {
	c.t.Helper()
	r := proctest.Run(c.t, bin, nil, "status", "--json", "--config", c.cfg)
	if r.Code != 0 {
		c.t.Fatalf("status: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	var st ops.Status
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		c.t.Fatalf("status --json: %v\n%s", err, r.Stdout)
	}
	return st
}

func scheduleOf(t *testing.T, st ops.Status, id string) ops.Schedule {
	t.Helper()
	for _, s := range st.Schedules {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("status has no schedule %q", id)
	return ops.Schedule{}
}

// TestClusterStopCancelRunningBy, on Redis and on Postgres with three
// real nodes: a trigger asked while no node runs stays queued, status
// shows it queued with who asked, and cancel drops it so it never runs;
// a long run shows in status as running on its node (with its attempt);
// stop, asked of the backend by the CLI, makes that node cancel it
// (SIGTERM: the job never reaches its end), recorded cancelled with no
// retry, and status shows it idle; a second stop finds nothing (exit 1);
// and a pause through another node's API is recorded as done by "api"
// and the client's address.
func TestClusterStopCancelRunningBy(t *testing.T) {
	t.Parallel()
	me := "unknown"
	if u, err := user.Current(); err == nil {
		me = u.Username
	}
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			c := newOpsCluster(t, lockingTOML, st, stopSchedules)

			// Queued while every node is down, then cancelled.
			if r := proctest.Run(t, bin, nil, "trigger", "idle", "--wait", "200ms", "--config", c.cfg); r.Code != exitFailure {
				t.Fatalf("trigger with no node up: exit %d, want 1 (queued)\n%s%s", r.Code, r.Stdout, r.Stderr)
			}
			q := scheduleOf(t, c.statusOf(), "idle")
			if len(q.Queued) != 1 || q.Queued[0].Kind != "trigger" || !strings.HasPrefix(q.Queued[0].By, me+"@") {
				t.Fatalf("idle queued = %+v, want one trigger by %s@host", q.Queued, me)
			}
			if q.LastAction == nil || q.LastAction.Kind != cluster.ActionTrigger || !strings.HasPrefix(q.LastAction.By, me+"@") {
				t.Fatalf("idle last action = %+v, want the trigger by %s@host", q.LastAction, me)
			}
			r := proctest.Run(t, bin, nil, "cancel", "idle", "--json", "--config", c.cfg)
			var ca ops.CancelAnswer
			if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &ca) != nil || ca.Cancelled != 1 || ca.Schedule != "idle" {
				t.Fatalf("cancel: exit %d, %+v\n%s%s", r.Code, ca, r.Stdout, r.Stderr)
			}
			q = scheduleOf(t, c.statusOf(), "idle")
			if len(q.Queued) != 0 || q.LastAction == nil || q.LastAction.Kind != cluster.ActionCancel {
				t.Fatalf("after cancel: queued %+v, last action %+v; want none queued, cancel last", q.Queued, q.LastAction)
			}

			c.setSleep("300")
			n1 := c.start("node-1", "")
			c.start("node-2", "")
			c.start("node-3", "")
			acc := c.trigger("long")
			var running ops.Running
			waitFor(t, "status to show the run", 15*time.Second, func() bool {
				s := scheduleOf(t, c.statusOf(), "long")
				if len(s.Running) == 1 {
					running = s.Running[0]
					return true
				}
				return false
			})
			if !strings.Contains(acc.Stdout, running.Node) || running.Attempt != 1 || running.RunID == "" || running.StartedAt.IsZero() {
				t.Fatalf("running = %+v; want the run of the node that accepted the trigger (%s), attempt 1", running, strings.TrimSpace(acc.Stdout))
			}

			r = proctest.Run(t, bin, nil, "stop", "long", "--wait", "20s", "--json", "--config", c.cfg)
			var sa ops.StopAnswer
			if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &sa) != nil {
				t.Fatalf("stop: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
			}
			if len(sa.Stopped) != 1 || sa.Stopped[0].Node != running.Node || sa.Stopped[0].RunID != running.RunID {
				t.Fatalf("stop answered %+v, want the run %s on %s", sa, running.RunID, running.Node)
			}
			var rec cluster.Run
			waitFor(t, "the stopped run's record", 20*time.Second, func() bool {
				for _, h := range c.history("long") {
					if h.RunID == running.RunID {
						rec = h
						return true
					}
				}
				return false
			})
			if rec.Result != "cancelled" || rec.Attempts != 1 || rec.Node != running.Node {
				t.Fatalf("stopped run recorded %+v, want cancelled after 1 attempt on %s (no retry)", rec, running.Node)
			}
			for _, jr := range c.jobRuns("long") {
				if jr.Ended {
					t.Fatalf("a job of long reached its end: %+v; stop must have cut it", jr)
				}
				if jr.Attempt != 1 {
					t.Fatalf("job attempt %+v: a stopped run was retried", jr)
				}
			}
			waitFor(t, "status to show long idle", 15*time.Second, func() bool {
				return len(scheduleOf(t, c.statusOf(), "long").Running) == 0
			})
			if r := proctest.Run(t, bin, nil, "stop", "long", "--wait", "2s", "--config", c.cfg); r.Code != exitFailure ||
				!strings.Contains(r.Stderr, "nothing of this schedule is running") {
				t.Fatalf("stop of an idle schedule: exit %d, want 1 naming it\n%s%s", r.Code, r.Stdout, r.Stderr)
			}

			// A pause through a node's API names the API and the client.
			req, _ := http.NewRequest(http.MethodPost, "http://"+n1.addr+"/api/v1/schedules/long/pause", strings.NewReader(`{"note":"by api"}`))
			req.Header.Set("Authorization", "Bearer stop-test-token")
			req.Header.Set("X-Bext-By", "alice@laptop")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("pause through the API: %s", resp.Status)
			}
			la := scheduleOf(t, c.statusOf(), "long").LastAction
			if la == nil || la.Kind != cluster.ActionPause || la.By != "api 127.0.0.1 (alice@laptop)" || la.Note != "by api" {
				t.Fatalf("last action after the API's pause = %+v, want pause by \"api 127.0.0.1 (alice@laptop)\"", la)
			}

			// A stop through the API of a node that does not run it.
			acc = c.trigger("long") // a trigger runs a paused schedule too
			waitFor(t, "status to show the second run", 15*time.Second, func() bool {
				s := scheduleOf(t, c.statusOf(), "long")
				if len(s.Running) == 1 && s.Running[0].RunID != running.RunID {
					running = s.Running[0]
					return true
				}
				return false
			})
			other := c.nodes["node-1"]
			if running.Node == "node-1" {
				other = c.nodes["node-2"]
			}
			req, _ = http.NewRequest(http.MethodPost, "http://"+other.addr+"/api/v1/schedules/long/stop?wait=20s", nil)
			req.Header.Set("Authorization", "Bearer stop-test-token")
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			sa = ops.StopAnswer{}
			err = json.NewDecoder(resp.Body).Decode(&sa)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || len(sa.Stopped) != 1 || sa.Stopped[0].RunID != running.RunID {
				t.Fatalf("stop through %s's API: %s, %+v, %v; want the run %s of %s stopped", other.id, resp.Status, sa, err, running.RunID, running.Node)
			}
			waitFor(t, "the second stopped run's record", 20*time.Second, func() bool {
				for _, h := range c.history("long") {
					if h.RunID == running.RunID {
						rec = h
						return true
					}
				}
				return false
			})
			if rec.Result != "cancelled" {
				t.Fatalf("run stopped through the API recorded %+v, want cancelled", rec)
			}
		})
	}
}

// Bad input to stop and cancel is a usage error (exit 2) naming what is
// wrong, never a crash, and leaves nothing behind: an unknown id, a wait
// of zero or below, a missing id; stop of a schedule nothing runs is 1.
func TestStopCancelBadInput(t *testing.T) {
	t.Parallel()
	lockingTOML, st := opstest.Shared()[0].New(t)
	cfg := writeFile(t, t.TempDir(), "bext.config.toml", "[http]\nlisten = \"off\"\n"+lockingTOML+opsSchedules)
	for _, c := range []struct {
		args []string
		want int
		says string
	}{
		{[]string{"stop", "nosuch"}, exitUsage, `unknown schedule "nosuch"`},
		{[]string{"cancel", "nosuch"}, exitUsage, `unknown schedule "nosuch"`},
		{[]string{"stop", "job", "--wait", "0s"}, exitUsage, "--wait must be more than 0"},
		{[]string{"stop", "job", "--wait", "-1s"}, exitUsage, "--wait must be more than 0"},
		{[]string{"stop"}, exitUsage, "accepts 1 arg"},
		{[]string{"cancel"}, exitUsage, "accepts 1 arg"},
		{[]string{"stop", "job", "--wait", "1s"}, exitFailure, "nothing of this schedule is running"},
	} {
		r := cli(t, cfg, c.want, c.args...)
		if !strings.Contains(r.Stderr, c.says) {
			t.Errorf("%v: stderr %q, want it to say %q", c.args, r.Stderr, c.says)
		}
	}
	if n, err := st.Actions(t.Context(), "job", 10); err != nil || len(n) != 0 {
		t.Errorf("acts after refused commands: %+v, %v; want none", n, err)
	}
}
