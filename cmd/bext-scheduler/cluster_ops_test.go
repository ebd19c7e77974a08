package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/internal/proctest"
	"github.com/bext-dev/bext-scheduler/internal/service"
)

// The cluster-wide operator tests: two or three real nodes (the built
// binary) on real Redis and real Postgres, steered by the CLI with only
// the config, checked through the jobs' own side effects (a file per run)
// and the cluster's history.

// opsCluster is a test's nodes, their shared config and backend.
type opsCluster struct {
	t     *testing.T
	dir   string // runs/ holds one file per run; sleep says how long a run lasts
	cfg   string // the config every node and the CLI read
	st    ops.Store
	nodes map[string]*opsNode
	env   []string // added to the environment of its nodes and CLI runs
}

type opsNode struct {
	id   string
	p    *proctest.Node
	addr string // host:port of /metrics and the API
}

// recordJob is a shell command that leaves one file per attempt in
// dir/runs, named after the schedule: "RUN_ID TICK NODE ATTEMPT" on its
// first line, then sleeps for the seconds dir/sleep says (0 without it)
// and appends "end".
func recordJob(dir string) string {
	return fmt.Sprintf(`f=$(mktemp "%[1]s/runs/$BEXT_SCHEDULE_ID.XXXXXX") && echo "$BEXT_RUN_ID $BEXT_TICK_TIME $BEXT_NODE_ID $BEXT_ATTEMPT" > "$f" && sleep "$(cat %[1]s/sleep 2>/dev/null || echo 0)" && echo end >> "$f"`, dir)
}

// newOpsCluster writes the config: the backend's [locking] table with a
// short safety margin (a killed holder's Redis lock lives TTL =
// expected_runtime + 1s), and schedules, in which @JOB@ stands for
// recordJob and @DIR@ for the test's directory.
func newOpsCluster(t *testing.T, lockingTOML string, st ops.Store, schedules string) *opsCluster {
	t.Helper()
	// Not t.TempDir: a job the test's last node killed may still be
	// writing its record while the directory is removed, and TempDir's
	// cleanup then fails the test; the removal here retries once.
	dir, err := os.MkdirTemp("", "ops-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.RemoveAll(dir) != nil {
			time.Sleep(100 * time.Millisecond) // a straggler's write; nothing to be told by
			_ = os.RemoveAll(dir)
		}
	})
	if err := os.Mkdir(filepath.Join(dir, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &opsCluster{t: t, dir: dir, st: st, nodes: map[string]*opsNode{}}
	c.cfg = c.config("bext.config.toml", lockingTOML, schedules)
	return c
}

// config writes another config file of the cluster (a node that drifts).
func (c *opsCluster) config(name, lockingTOML, schedules string) string {
	lockingTOML = strings.Replace(lockingTOML, "[locking]\n", "[locking]\nsafety_margin = \"1s\"\nmax_clock_skew = \"500ms\"\n", 1)
	schedules = strings.NewReplacer("@JOB@", recordJob(c.dir), "@DIR@", c.dir).Replace(schedules)
	return writeFile(c.t, c.dir, name, "shutdown_grace = \"2s\"\n[log]\nlevel = \"debug\"\n"+lockingTOML+schedules)
}

// start starts node id on cfg (the cluster's config when "") and waits
// until it serves HTTP.
func (c *opsCluster) start(id, cfg string, args ...string) *opsNode {
	c.t.Helper()
	if cfg == "" {
		cfg = c.cfg
	}
	// nodeBin: not -race (see main_test.go).
	p := proctest.Start(c.t, nodeBin, c.env, append([]string{"run", "--config", cfg, "--node-id", id, "--listen", "127.0.0.1:0"}, args...)...)
	m := p.WaitLog(addrRE, 60*time.Second)
	n := &opsNode{id: id, p: p, addr: m[1]}
	c.nodes[id] = n
	return n
}

// cli runs the CLI on the cluster's config and environment, wanting exit
// code want.
func (c *opsCluster) cli(want int, args ...string) proctest.Result {
	c.t.Helper()
	r := proctest.Run(c.t, bin, c.env, append(args, "--config", c.cfg)...)
	if r.Code != want {
		c.t.Fatalf("%v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, r.Code, want, r.Stdout, r.Stderr)
	}
	return r
}

// setSleep sets how long the next runs last.
func (c *opsCluster) setSleep(seconds string) {
	writeFile(c.t, c.dir, "sleep", seconds+"\n")
}

// trigger runs the CLI's trigger until a node accepts it: a regular run
// holding the lock at that moment makes it refuse at once (exit 75), as
// designed, and the test asks again.
func (c *opsCluster) trigger(id string) proctest.Result {
	c.t.Helper()
	for range 20 {
		r := proctest.Run(c.t, bin, c.env, "trigger", id, "--config", c.cfg)
		switch r.Code {
		case 0:
			return r
		case exitHeld:
			c.t.Logf("trigger %s: refused while a run holds the lock; asking again", id)
			time.Sleep(200 * time.Millisecond) // the run cannot tell us it ended
			continue
		}
		c.t.Fatalf("trigger %s: exit %d\n%s%s", id, r.Code, r.Stdout, r.Stderr)
	}
	c.t.Fatalf("trigger %s: refused 20 times", id)
	return proctest.Result{}
}

// jobRun is what one attempt left in dir/runs.
type jobRun struct {
	RunID   string
	Tick    time.Time
	Node    string
	Attempt int
	Ended   bool
}

// jobRuns reads the attempts of schedule the jobs recorded so far.
func (c *opsCluster) jobRuns(schedule string) []jobRun {
	c.t.Helper()
	files, err := filepath.Glob(filepath.Join(c.dir, "runs", schedule+".*"))
	if err != nil {
		c.t.Fatal(err)
	}
	var out []jobRun
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			c.t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		fields := strings.Fields(lines[0])
		if len(fields) != 4 {
			continue // being written
		}
		tick, err := time.Parse(time.RFC3339Nano, fields[1])
		if err != nil {
			c.t.Fatalf("%s: BEXT_TICK_TIME %q: %v", f, fields[1], err)
		}
		attempt, _ := strconv.Atoi(fields[3])
		out = append(out, jobRun{RunID: fields[0], Tick: tick, Node: fields[2], Attempt: attempt,
			Ended: len(lines) > 1 && lines[1] == "end"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tick.Before(out[j].Tick) })
	return out
}

// history reads a schedule's finished runs from the backend, newest
// first: the provisional records of runs still going (result running)
// are left out, as the tests wait for how runs ended (allHistory has them).
func (c *opsCluster) history(schedule string) []cluster.Run {
	c.t.Helper()
	var out []cluster.Run
	for _, r := range c.allHistory(schedule) {
		if r.Result != cluster.ResultRunning {
			out = append(out, r)
		}
	}
	return out
}

// allHistory reads a schedule's whole history, newest first.
func (c *opsCluster) allHistory(schedule string) []cluster.Run {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runs, err := c.st.Runs(ctx, schedule, 1000)
	if err != nil {
		c.t.Fatal(err)
	}
	return runs
}

// waitFor polls cond (files and the backend cannot tell us) until it holds.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting %v for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metric sums the node's series of name whose labels include labels
// (`schedule="x"` each), from /metrics.
func (n *opsNode) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.addr + "/metrics")
	if err != nil {
		t.Fatalf("%s: %v", n.id, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, l := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		match := true
		for _, lb := range labels {
			match = match && strings.Contains(l, lb)
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", n.id, l, err)
		}
		sum += v
	}
	return sum
}

func ticksAfter(runs []jobRun, after time.Time) []jobRun {
	var out []jobRun
	for _, r := range runs {
		if r.Tick.After(after) {
			out = append(out, r)
		}
	}
	return out
}

func nodesOf(runs []jobRun) map[string]int {
	m := map[string]int{}
	for _, r := range runs {
		m[r.Node]++
	}
	return m
}

const pauseSchedules = `
[[scheduled]]
id = "g"
cron = "*/1 * * * * *"
hint = "require_global"
expected_runtime = "1s"
command = ["/bin/sh", "-c", '@JOB@']
[[scheduled]]
id = "l"
cron = "*/1 * * * * *"
hint = "node_local"
expected_runtime = "1s"
command = ["/bin/sh", "-c", '@JOB@']
`

// TestClusterPauseStopsEveryNode: a pause from the CLI stops a
// require_global and a node_local every-second schedule on all three
// nodes within a tick; resume starts them again and never replays the
// ticks skipped while paused.
func TestClusterPauseStopsEveryNode(t *testing.T) {
	t.Parallel()
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			c := newOpsCluster(t, lockingTOML, st, pauseSchedules)
			ids := []string{"node-1", "node-2", "node-3"}
			for _, id := range ids {
				c.start(id, "")
			}
			up := time.Now()
			waitFor(t, "every node running l and g running", 30*time.Second, func() bool {
				return len(nodesOf(ticksAfter(c.jobRuns("l"), up))) == 3 && len(ticksAfter(c.jobRuns("g"), up)) >= 2
			})

			cli(t, c.cfg, 0, "pause", "g", "--note", "incident")
			cli(t, c.cfg, 0, "pause", "l")
			paused := time.Now()
			// Every node skips l as paused; g's paused ticks are skipped by
			// whichever node asks first (the others are told "done").
			for _, id := range ids {
				c.nodes[id].p.WaitLogN(regexp.MustCompile(`tick skipped.* schedule=l .*outcome=paused`), 2, 20*time.Second)
			}
			pausedG := regexp.MustCompile(`tick skipped.* schedule=g .*outcome=paused`)
			waitFor(t, "g skipped as paused twice", 20*time.Second, func() bool {
				n := 0
				for _, nd := range c.nodes {
					n += len(pausedG.FindAllString(nd.p.Log(), -1))
				}
				return n >= 2
			})
			// Within a tick: nothing ticked after the pause returned plus
			// one period has run (a tick in flight when the flag was set
			// may finish).
			for _, s := range []string{"g", "l"} {
				if late := ticksAfter(c.jobRuns(s), paused.Add(time.Second)); len(late) > 0 {
					t.Errorf("%s ran after the pause: %+v", s, late)
				}
			}
			var status ops.Status
			if err := json.Unmarshal([]byte(cli(t, c.cfg, 0, "status", "--json").Stdout), &status); err != nil {
				t.Fatal(err)
			}
			for _, s := range status.Schedules {
				if !s.Paused {
					t.Errorf("status: %s not paused", s.ID)
				}
			}

			before := time.Now()
			cli(t, c.cfg, 0, "resume", "g")
			cli(t, c.cfg, 0, "resume", "l")
			after := time.Now()
			waitFor(t, "g and l running again on every node", 30*time.Second, func() bool {
				return len(nodesOf(ticksAfter(c.jobRuns("l"), after))) == 3 && len(ticksAfter(c.jobRuns("g"), after)) >= 2
			})
			// Never replayed: no run of a tick from the paused span.
			for _, s := range []string{"g", "l"} {
				for _, r := range ticksAfter(c.jobRuns(s), paused.Add(time.Second)) {
					if r.Tick.Before(before.Truncate(time.Second)) {
						t.Errorf("%s: tick %s, skipped while paused, ran after resume on %s", s, r.Tick.Format(time.RFC3339), r.Node)
					}
				}
			}
			// g's ticks ran once each throughout.
			seen := map[int64]string{}
			for _, r := range c.jobRuns("g") {
				if prev, dup := seen[r.Tick.Unix()]; dup {
					t.Errorf("g tick %s ran on %s and %s", r.Tick.Format(time.RFC3339), prev, r.Node)
				}
				seen[r.Tick.Unix()] = r.Node
			}
		})
	}
}

const triggerSchedules = `
[[scheduled]]
id = "once"
cron = "*/10 * * * * *"
hint = "require_global"
# 3s, not 1s: with the cluster's 1s safety margin a lease of 1s renews
# every 333ms, each renewal bounded by that; a loaded CI machine's
# Postgres missed it (lock_lost). The runs take 0.2s either way.
expected_runtime = "3s"
command = ["/bin/sh", "-c", '@JOB@']
`

// TestClusterTriggerRunsOnce: across three nodes a trigger runs exactly
// once; ten triggers asked within one second are ten distinct runs, one
// after another (overlap = "skip"); and a regular tick that falls while a
// triggered run holds the lock still runs, late, once the run ends.
func TestClusterTriggerRunsOnce(t *testing.T) {
	t.Parallel()
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			c := newOpsCluster(t, lockingTOML, st, triggerSchedules)
			ctx := t.Context()
			c.setSleep("0.2")

			// Ten triggers within one second, asked through the code the
			// CLI runs before any node is up: with a node up, a trigger
			// asked while an earlier one runs is refused at once (exit 75),
			// so "ten in a second" are ten only when queued together.
			cfg, err := loadConfig(io.Discard, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			svc := ops.New(st, service.Schedules(cfg, slog.New(slog.DiscardHandler), nil), ops.Options{By: "test"})
			type answer struct {
				a   ops.TriggerAnswer
				err error
			}
			answers := make(chan answer, 10)
			asked := time.Now()
			for range 10 {
				go func() {
					a, err := svc.Trigger(ctx, "once", 2*time.Minute)
					answers <- answer{a, err}
				}()
			}
			var queued []cluster.Request
			waitFor(t, "ten triggers queued", 10*time.Second, func() bool {
				queued, err = st.Requests(ctx, "once")
				return err == nil && len(queued) == 10
			})
			if d := time.Since(asked); d > time.Second {
				t.Logf("the ten triggers took %v to queue", d)
			}
			for _, id := range []string{"node-1", "node-2", "node-3"} {
				c.start(id, "")
			}
			for range 10 {
				a := <-answers
				if a.err != nil || !a.a.Accepted || a.a.Node == "" {
					t.Fatalf("trigger: %+v, %v", a.a, a.err)
				}
			}
			want := map[string]bool{}
			for _, q := range queued {
				want[q.ID] = true
			}
			manualRuns := func() []cluster.Run {
				var out []cluster.Run
				for _, r := range c.history("once") {
					if r.Manual {
						out = append(out, r)
					}
				}
				return out
			}
			waitFor(t, "ten triggered runs in history", 60*time.Second, func() bool { return len(manualRuns()) == 10 })
			ms := manualRuns()
			slices.Reverse(ms) // oldest first
			for i, r := range ms {
				if !want[r.RunID] || r.Result != "success" || r.Attempts != 1 {
					t.Errorf("triggered run %+v: not one of the requests, or not one success", r)
				}
				delete(want, r.RunID)
				if i > 0 {
					if prev := ms[i-1]; r.StartedAt.Before(prev.StartedAt.Add(prev.Duration)) {
						t.Errorf("triggered runs overlap: %s on %s started %s, before %s on %s ended (%s)", r.RunID, r.Node,
							r.StartedAt.Format(time.RFC3339Nano), prev.RunID, prev.Node, prev.StartedAt.Add(prev.Duration).Format(time.RFC3339Nano))
					}
				}
			}
			// The jobs agree: each triggered run id ran once.
			byID := map[string]int{}
			for _, r := range c.jobRuns("once") {
				byID[r.RunID]++
			}
			for _, q := range queued {
				if byID[q.ID] != 1 {
					t.Errorf("run %s ran %d times, want once", q.ID, byID[q.ID])
				}
			}

			// One trigger from the CLI: exactly one run on the node that
			// accepted it; the next regular tick has run by the time we count.
			r := c.trigger("once")
			m := regexp.MustCompile(`accepted by node (\S+)`).FindStringSubmatch(r.Stdout)
			if m == nil {
				t.Fatalf("trigger said %q", r.Stdout)
			}
			triggered := time.Now()
			waitFor(t, "the next regular tick after the trigger", 30*time.Second, func() bool {
				for _, h := range c.history("once") {
					if !h.Manual && h.Tick.After(triggered) {
						return true
					}
				}
				return false
			})
			ms = manualRuns()
			if len(ms) != 11 || ms[0].Node != m[1] || want[ms[0].RunID] {
				t.Fatalf("after one more trigger accepted by %s, the manual runs are %+v", m[1], ms)
			}
			byID = map[string]int{}
			for _, r := range c.jobRuns("once") {
				byID[r.RunID]++
				if byID[r.RunID] > 1 {
					t.Errorf("BEXT_RUN_ID %s seen twice", r.RunID)
				}
			}
			if byID[ms[0].RunID] != 1 {
				t.Errorf("the CLI's trigger %s ran %d times", ms[0].RunID, byID[ms[0].RunID])
			}

			// A trigger that holds the lock across a regular tick T: T runs
			// late, after it, once. The trigger is asked 3s before T and
			// lasts 4s (a node polls every second).
			c.setSleep("4")
			var tick time.Time
			var trig cluster.Run
			for attempt := 0; ; attempt++ {
				now := time.Now()
				next := now.Truncate(10 * time.Second).Add(10 * time.Second)
				if next.Sub(now) < 3*time.Second {
					next = next.Add(10 * time.Second)
				}
				time.Sleep(time.Until(next.Add(-3 * time.Second))) // waiting for a wall-clock moment
				c.trigger("once")
				waitFor(t, "the long trigger's run", 30*time.Second, func() bool { return len(manualRuns()) == 12+attempt })
				trig = manualRuns()[0]
				if trig.StartedAt.Before(next) {
					tick = next
					break
				}
				if attempt == 2 {
					t.Fatalf("three triggers asked 3s before a tick started after it (%v): the machine is too slow for this test", trig.StartedAt)
				}
			}
			waitFor(t, "tick "+tick.Format(time.RFC3339)+" in history", 30*time.Second, func() bool {
				for _, h := range c.history("once") {
					if !h.Manual && h.Tick.Equal(tick) {
						return true
					}
				}
				return false
			})
			var regular []cluster.Run
			for _, h := range c.history("once") {
				if !h.Manual && h.Tick.Equal(tick) {
					regular = append(regular, h)
				}
			}
			if len(regular) != 1 {
				t.Fatalf("tick %s ran %d times: %+v", tick.Format(time.RFC3339), len(regular), regular)
			}
			if end := trig.StartedAt.Add(trig.Duration); regular[0].StartedAt.Before(end) {
				t.Errorf("tick %s started %s, before the trigger holding the lock ended (%s)", tick.Format(time.RFC3339),
					regular[0].StartedAt.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano))
			}

			// Every regular tick since the nodes started ran once.
			seen := map[int64]int{}
			for _, h := range c.history("once") {
				if !h.Manual {
					seen[h.Tick.Unix()]++
				}
			}
			first := ms[len(ms)-1].StartedAt.Truncate(10 * time.Second).Add(10 * time.Second)
			for tk := first; tk.Before(tick); tk = tk.Add(10 * time.Second) {
				if seen[tk.Unix()] != 1 {
					t.Errorf("regular tick %s ran %d times, want once", tk.Format(time.RFC3339), seen[tk.Unix()])
				}
			}
		})
	}
}

// TestClusterHistoryAndRetries: history shows runs from several nodes,
// newest first, with attempts, run ids and output tails whose secrets
// (a ${VAR} value, a URL's credentials) are masked; a command failing
// twice then succeeding is one success with attempts 3 and two retries.
func TestClusterHistoryAndRetries(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-7f1e9a0b"
	// Given to the nodes and the CLI alone (not t.Setenv, which would
	// keep this test from running beside the others).
	env := []string{"BEXT_TEST_HISTORY_SECRET=" + secret}
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			c := newOpsCluster(t, lockingTOML, st, `
[[scheduled]]
id = "hist"
cron = "*/1 * * * * *"
hint = "require_global"
expected_runtime = "1s"
command = ["/bin/sh", "-c", 'echo "token=${BEXT_TEST_HISTORY_SECRET} dsn=postgres://bob:hunter22@db.example.com:5432/app"; echo to-stderr >&2']
[[scheduled]]
id = "flaky"
cron = "0 0 1 1 *"
hint = "require_global"
retries = 2
retry_backoff = "100ms"
command = ["/bin/sh", "-c", '@JOB@; echo "attempt $BEXT_ATTEMPT"; [ "$BEXT_ATTEMPT" -ge 3 ]']
`)
			c.env = env
			for _, id := range []string{"node-1", "node-2", "node-3"} {
				c.start(id, "")
			}

			// Retries end to end.
			r := c.trigger("flaky")
			if !strings.Contains(r.Stdout, "accepted by node") {
				t.Fatalf("trigger: %s", r.Stdout)
			}
			waitFor(t, "flaky's run in history", 30*time.Second, func() bool { return len(c.history("flaky")) == 1 })
			run := c.history("flaky")[0]
			if run.Result != "success" || run.Attempts != 3 || !run.Manual || !strings.Contains(run.OutputTail, "attempt 3") {
				t.Errorf("flaky's run: %+v", run)
			}
			var attempts []int
			for _, jr := range c.jobRuns("flaky") {
				if jr.RunID != run.RunID || jr.Node != run.Node {
					t.Errorf("attempt %+v is not of run %s on %s", jr, run.RunID, run.Node)
				}
				attempts = append(attempts, jr.Attempt)
			}
			slices.Sort(attempts)
			if !slices.Equal(attempts, []int{1, 2, 3}) {
				t.Errorf("BEXT_ATTEMPT of the attempts: %v, want 1 2 3", attempts)
			}
			retries, successes := 0.0, 0.0
			for _, n := range c.nodes {
				retries += n.metric(t, "bext_scheduler_retries_total", `schedule="flaky"`)
				successes += n.metric(t, "bext_scheduler_runs_total", `schedule="flaky"`, `result="success"`)
			}
			if retries != 2 || successes != 1 {
				t.Errorf("bext_scheduler_retries_total %v (want 2), runs_total success %v (want 1), over the nodes", retries, successes)
			}

			// History from several nodes: stop whoever ran hist most until
			// another node has run it too.
			waitFor(t, "hist's runs", 30*time.Second, func() bool { return len(c.history("hist")) >= 6 })
			nodes := func() map[string]int {
				m := map[string]int{}
				for _, h := range c.history("hist") {
					m[h.Node]++
				}
				return m
			}
			if len(nodes()) < 2 {
				for id := range nodes() {
					c.nodes[id].p.Signal(syscall.SIGTERM)
					if code := c.nodes[id].p.Wait(30 * time.Second); code != 0 {
						t.Fatalf("%s exited %d", id, code)
					}
				}
				waitFor(t, "hist run on a second node", 30*time.Second, func() bool { return len(nodes()) >= 2 })
			}
			var hs []ops.Run
			r = c.cli(0, "history", "hist", "-n", "100", "--json")
			if err := json.Unmarshal([]byte(r.Stdout), &hs); err != nil {
				t.Fatal(err)
			}
			ids := map[string]bool{}
			finished := 0
			for i, h := range hs {
				if i > 0 && h.StartedAt.After(hs[i-1].StartedAt) {
					t.Errorf("history not newest first: %s after %s", h.StartedAt, hs[i-1].StartedAt)
				}
				// A run in flight when history was read has no output yet;
				// a tick a loaded machine could not start in time is
				// not_run, and a run whose renewal it delayed past the
				// lease is lock_lost, killed before its output: none is
				// what this checks.
				if h.Result == "running" || h.Result == "not_run" || h.Result == "lock_lost" {
					continue
				}
				finished++
				if h.RunID == "" || ids[h.RunID] || h.Attempts != 1 || h.Result != "success" || h.Manual || h.Fence <= 0 {
					t.Errorf("run %+v", h)
				}
				ids[h.RunID] = true
				if !strings.Contains(h.OutputTail, "token=*** dsn=postgres://db.example.com:5432") || !strings.Contains(h.OutputTail, "to-stderr") {
					t.Errorf("output tail %q: secrets not masked as expected, or stderr missing", h.OutputTail)
				}
			}
			if finished < 5 {
				t.Errorf("history --json holds %d finished runs of hist, want at least 5", finished)
			}
			for _, leak := range []string{secret, "hunter22", "bob:"} {
				if strings.Contains(r.Stdout, leak) {
					t.Errorf("history --json shows %q", leak)
				}
			}
			r = c.cli(0, "history", "hist", "-n", "5")
			lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
			if len(lines) != 6 || !regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`).MatchString(lines[1]) {
				t.Errorf("history -n 5:\n%s", r.Stdout)
			}
			if strings.Contains(r.Stdout, secret) || strings.Contains(r.Stdout, "hunter22") {
				t.Errorf("history shows a secret:\n%s", r.Stdout)
			}
			// Nor does any node's log, where the job's output lines go.
			for id, n := range c.nodes {
				if log := n.p.Log(); strings.Contains(log, secret) || strings.Contains(log, "hunter22") {
					t.Errorf("the log of %s shows the job's secret", id)
				}
			}
		})
	}
}

// TestClusterDrift: a node whose schedule file differs raises drift on the
// others: a warning naming the schedule, both sides and the field that
// differs, the gauge at 1 on every node, status naming the nodes on each
// side and the field; a graceful stop of the odd node resolves it.
func TestClusterDrift(t *testing.T) {
	t.Parallel()
	const same = `
[[scheduled]]
id = "same"
cron = "0 0 1 1 *"
command = ["true"]
`
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			c := newOpsCluster(t, lockingTOML, st, same+`
[[scheduled]]
id = "d"
cron = "*/5 * * * *"
command = ["true"]
`)
			odd := c.config("odd.toml", lockingTOML, same+`
[[scheduled]]
id = "d"
cron = "*/7 * * * *"
command = ["true"]
`)
			a, bn := c.start("node-a", ""), c.start("node-b", "")
			cn := c.start("node-c", odd)
			// Within an announce period of seeing the drift, each node
			// announces d's field hashes, and the warning names the field.
			warn := regexp.MustCompile(`level=WARN msg="config drift: the live nodes run different schedules".* drift="d: definition \w+ on (node-a,node-b vs definition \w+ on node-c|node-c vs definition \w+ on node-a,node-b) \(cron differs\)"`)
			for _, n := range []*opsNode{a, bn, cn} {
				n.p.WaitLog(warn, 30*time.Second)
			}
			for _, n := range []*opsNode{a, bn, cn} {
				if v := n.metric(t, "bext_cluster_config_drift"); v != 1 {
					t.Errorf("%s: bext_cluster_config_drift %v, want 1", n.id, v)
				}
			}
			r := cli(t, c.cfg, 0, "status")
			if !regexp.MustCompile(`(?m)^  d: (\w+ on node-a, node-b; \w+ on node-c|\w+ on node-c; \w+ on node-a, node-b) \(cron differs\)$`).MatchString(r.Stdout) ||
				strings.Contains(r.Stdout, "  same:") {
				t.Errorf("status does not name d and the nodes on each side:\n%s", r.Stdout)
			}
			var s ops.Status
			if err := json.Unmarshal([]byte(cli(t, c.cfg, 0, "status", "--json").Stdout), &s); err != nil {
				t.Fatal(err)
			}
			if !s.ConfigDrift.Drifted || len(s.ConfigDrift.Schedules) != 1 || s.ConfigDrift.Schedules[0].ID != "d" || len(s.Nodes) != 3 ||
				fmt.Sprint(s.ConfigDrift.Schedules[0].Fields) != "[cron]" {
				t.Errorf("status --json: %+v", s)
			}

			cn.p.Signal(syscall.SIGTERM)
			if code := cn.p.Wait(30 * time.Second); code != 0 {
				t.Fatalf("node-c exited %d", code)
			}
			a.p.WaitLog(regexp.MustCompile(`config drift resolved`), 30*time.Second)
			if v := a.metric(t, "bext_cluster_config_drift"); v != 0 {
				t.Errorf("bext_cluster_config_drift %v after node-c left, want 0", v)
			}
		})
	}
}

// TestClusterBackfillResumesAfterKill: a backfill of five ticks runs each
// once, in order, with its own BEXT_TICK_TIME; the node running it is
// killed -9 mid-backfill and another node carries on from the tick that
// was cut short.
func TestClusterBackfillResumesAfterKill(t *testing.T) {
	t.Parallel()
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			c := newOpsCluster(t, lockingTOML, st, `
[[scheduled]]
id = "bf"
cron = "0 0 * * *"
hint = "require_global"
expected_runtime = "2s"
command = ["/bin/sh", "-c", '@JOB@']
`)
			c.setSleep("1.5")
			for _, id := range []string{"node-1", "node-2", "node-3"} {
				c.start(id, "")
			}
			r := cli(t, c.cfg, 0, "backfill", "bf", "--from", "2026-01-10T00:00:00Z", "--to", "2026-01-14T00:00:00Z")
			if !strings.Contains(r.Stdout, "queued 5 ticks of bf") {
				t.Fatalf("backfill: %s", r.Stdout)
			}
			day := func(d int) time.Time { return time.Date(2026, 1, d, 0, 0, 0, 0, time.UTC) }
			var victim string
			waitFor(t, "the second tick running", 30*time.Second, func() bool {
				for _, jr := range c.jobRuns("bf") {
					if jr.Tick.Equal(day(11)) && !jr.Ended {
						victim = jr.Node
						return true
					}
				}
				return false
			})
			killed := time.Now()
			c.nodes[victim].p.Signal(syscall.SIGKILL)
			c.nodes[victim].p.Wait(30 * time.Second)

			waitFor(t, "five backfilled ticks ended", 90*time.Second, func() bool {
				ended := 0
				for _, jr := range c.jobRuns("bf") {
					if jr.Ended {
						ended++
					}
				}
				return ended == 5
			})
			waitFor(t, "five runs in history", 10*time.Second, func() bool { return len(c.history("bf")) == 5 })
			hs := c.history("bf")
			slices.Reverse(hs)
			for i, h := range hs {
				if !h.Tick.Equal(day(10+i)) || h.Result != "success" || !h.Manual {
					t.Errorf("backfilled run %d: %+v", i, h)
				}
				if i > 0 && h.StartedAt.Before(hs[i-1].StartedAt.Add(hs[i-1].Duration)) {
					t.Errorf("tick %s started before tick %s ended", h.Tick.Format(time.RFC3339), hs[i-1].Tick.Format(time.RFC3339))
				}
			}
			if hs[1].Node == victim || hs[1].StartedAt.Before(killed) {
				t.Errorf("the tick cut short by the kill of %s was not run again elsewhere: %+v", victim, hs[1])
			}
			ends := map[int64]int{}
			for _, jr := range c.jobRuns("bf") {
				if jr.Ended {
					ends[jr.Tick.Unix()]++
				}
			}
			for d := 10; d <= 14; d++ {
				if ends[day(d).Unix()] != 1 {
					t.Errorf("tick %s ended %d times (BEXT_TICK_TIME), want once", day(d).Format(time.RFC3339), ends[day(d).Unix()])
				}
			}
			if q, err := st.Requests(t.Context(), "bf"); err != nil || len(q) != 0 {
				t.Errorf("after the backfill the queue holds %v, %v", q, err)
			}
		})
	}
}

// TestClusterNamesIsolate: two clusters (key_prefix / namespace) on one
// server, with the same schedule ids, see nothing of each other: status,
// history, nodes, drift and pause.
func TestClusterNamesIsolate(t *testing.T) {
	t.Parallel()
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockA, stA := b.New(t)
			lockB, stB := b.New(t)
			ca := newOpsCluster(t, lockA, stA, pauseSchedules)
			// B's l differs from A's: drift would show if nodes mixed.
			cb := newOpsCluster(t, lockB, stB, strings.Replace(pauseSchedules, `id = "l"
cron = "*/1 * * * * *"`, `id = "l"
cron = "*/2 * * * * *"`, 1))
			ca.start("a1", "")
			cb.start("b1", "")
			up := time.Now()
			waitFor(t, "g running in both clusters", 30*time.Second, func() bool {
				return len(ticksAfter(ca.jobRuns("g"), up)) >= 2 && len(ticksAfter(cb.jobRuns("g"), up)) >= 2
			})
			cli(t, ca.cfg, 0, "pause", "g")
			paused := time.Now()
			waitFor(t, "B's g running on after A's pause", 30*time.Second, func() bool {
				return len(ticksAfter(cb.jobRuns("g"), paused.Add(time.Second))) >= 2
			})
			if late := ticksAfter(ca.jobRuns("g"), paused.Add(time.Second)); len(late) > 0 {
				t.Errorf("A's g ran after its pause: %+v", late)
			}
			for _, x := range []struct {
				c    *opsCluster
				node string
				g    bool
			}{{ca, "a1", true}, {cb, "b1", false}} {
				var s ops.Status
				if err := json.Unmarshal([]byte(cli(t, x.c.cfg, 0, "status", "--json").Stdout), &s); err != nil {
					t.Fatal(err)
				}
				if len(s.Nodes) != 1 || s.Nodes[0].NodeID != x.node || s.ConfigDrift.Drifted {
					t.Errorf("status of %s's cluster: nodes %+v, drift %+v", x.node, s.Nodes, s.ConfigDrift)
				}
				for _, sc := range s.Schedules {
					if sc.Paused != (x.g && sc.ID == "g") || sc.LastRun == nil || sc.LastRun.Node != x.node {
						t.Errorf("status of %s's cluster: %s paused %v, last run %+v", x.node, sc.ID, sc.Paused, sc.LastRun)
					}
				}
				var hs []ops.Run
				if err := json.Unmarshal([]byte(cli(t, x.c.cfg, 0, "history", "g", "--json").Stdout), &hs); err != nil {
					t.Fatal(err)
				}
				for _, h := range hs {
					if h.Node != x.node {
						t.Errorf("%s's history of g shows a run of %s", x.node, h.Node)
					}
				}
			}
		})
	}
}
