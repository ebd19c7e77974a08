package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bext-dev/bext-scheduler/e2e/internal/ledger"
	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// The schedules every cluster runs.
const (
	globalID = "global" // require_global, every second
	localID  = "local"  // node_local, every second
	every    = time.Second
)

// Spec shapes a cluster.
type Spec struct {
	Nodes           int
	JobSleep        time.Duration   // how long each global run lasts (default 1ms)
	ExpectedRuntime time.Duration   // the global schedule's (default 1s)
	SafetyMargin    time.Duration   // default 1s
	MaxClockSkew    time.Duration   // default 500ms
	Offsets         []time.Duration // BEXT_TEST_CLOCK_OFFSET per node, by index
	LogLevel        string          // default debug (SkippedTicks reads the debug lines)
	Manual          bool            // the test starts the nodes itself (Node.Start)
	Cron            string          // the global schedule's (default every second)
	Overlap         string          // the global schedule's overlap (default: the config's, skip)
	Jitter          time.Duration   // the global schedule's jitter (default none)
	ShutdownGrace   time.Duration   // default 5s
	CatchupWindow   time.Duration   // the global schedule's catchup_window (default: one period)
	OpTimeout       time.Duration   // the backend's op_timeout (default: Backend.Section's)
	OnNodeLoss      string          // the global schedule's on_node_loss (default: the config's, skip)
	// GroupSchedules adds that many require_global every-second schedules
	// ("grp-1", ...) in concurrency group "g" of max_running GroupMax,
	// each run lasting GroupSleep.
	GroupSchedules, GroupMax int
	GroupSleep               time.Duration
}

// Cluster is N bext-scheduler processes sharing one config, one backend
// and one protected resource.
type Cluster struct {
	t       testing.TB
	Spec    Spec
	Backend *Backend
	Res     ledger.Resource
	config  string

	mu    sync.Mutex
	nodes []*Node
	dead  map[int]bool // job pids of runs whose node was killed under them
}

// Node is one member of a cluster: its process (a new one each Start), its
// own proxy to the backend, and its metrics address.
type Node struct {
	ID     string
	Proxy  *faultproxy.Proxy
	c      *Cluster
	offset time.Duration

	mu    sync.Mutex
	proc  *proctest.Node
	procs []*proctest.Node // every process this node ran, for their logs
	addr  string           // host:port of /metrics
}

var servingRe = regexp.MustCompile(`serving metrics and health.* addr=(\S+)`)

// startCluster writes the config and starts spec.Nodes nodes, each ready
// to serve metrics.
func startCluster(t testing.TB, b *Backend, spec Spec) *Cluster {
	t.Helper()
	if spec.JobSleep == 0 {
		spec.JobSleep = time.Millisecond
	}
	if spec.ExpectedRuntime == 0 {
		spec.ExpectedRuntime = time.Second
	}
	if spec.SafetyMargin == 0 {
		spec.SafetyMargin = time.Second
	}
	if spec.MaxClockSkew == 0 {
		spec.MaxClockSkew = 500 * time.Millisecond
	}
	if spec.LogLevel == "" {
		// A tick skipped as backend_error is logged at debug (one warning
		// per outage at info): SkippedTicks needs the debug lines.
		spec.LogLevel = "debug"
	}
	if spec.Cron == "" {
		spec.Cron = "*/1 * * * * *"
	}
	if spec.ShutdownGrace == 0 {
		spec.ShutdownGrace = 5 * time.Second
	}
	dir := t.TempDir()
	// Registered after TempDir, so it runs after the nodes' own cleanups
	// killed them and before the directory is removed: a job a dead node
	// left behind (its supervisor's parent-death signal still on its way)
	// may yet write its ledger record, and RemoveAll then failed the test
	// ("directory not empty", TestQueueRunsWaitingTicksOnce in a CI
	// rehearsal with the clusters six at a time).
	t.Cleanup(func() { killJobsIn(t, dir) })
	c := &Cluster{t: t, Spec: spec, Backend: b, Res: ledger.Resource{Dir: dir},
		config: filepath.Join(dir, "bext.config.toml")}
	job := func(sleep time.Duration) string {
		return fmt.Sprintf("[%q, \"-dir\", %q, \"-sleep\", %q]", ledgerJob, dir, sleep.String())
	}
	extra := ""
	if spec.Overlap != "" {
		extra += fmt.Sprintf("overlap = %q\n", spec.Overlap)
	}
	if spec.Jitter > 0 {
		extra += fmt.Sprintf("jitter = %q\n", spec.Jitter.String())
	}
	if spec.CatchupWindow > 0 {
		extra += fmt.Sprintf("catchup_window = %q\n", spec.CatchupWindow.String())
	}
	if spec.OnNodeLoss != "" {
		extra += fmt.Sprintf("on_node_loss = %q\n", spec.OnNodeLoss)
	}
	cfg := fmt.Sprintf(`shutdown_grace = %q
[log]
level = %q
%s
[[scheduled]]
id = %q
cron = %q
hint = "require_global"
expected_runtime = %q
command = %s
%s
[[scheduled]]
id = %q
cron = "*/1 * * * * *"
hint = "node_local"
expected_runtime = "1s"
command = %s
`, spec.ShutdownGrace.String(), spec.LogLevel, b.sectionOp(spec.SafetyMargin, spec.MaxClockSkew, spec.OpTimeout), globalID, spec.Cron,
		spec.ExpectedRuntime.String(), job(spec.JobSleep), extra, localID, job(time.Millisecond))
	for i := range spec.GroupSchedules {
		cfg += fmt.Sprintf(`[[scheduled]]
id = "grp-%d"
cron = "*/1 * * * * *"
hint = "require_global"
expected_runtime = %q
group = "g"
command = %s
`, i+1, (spec.GroupSleep + 2*time.Second).String(), job(spec.GroupSleep))
	}
	if spec.GroupSchedules > 0 {
		cfg += fmt.Sprintf("[groups.g]\nmax_running = %d\n", spec.GroupMax)
	}
	writeFile(t, c.config, cfg)

	for i := range spec.Nodes {
		n := &Node{ID: fmt.Sprintf("node-%d", i+1), c: c}
		if i < len(spec.Offsets) {
			n.offset = spec.Offsets[i]
		}
		if b.Target != "" { // the memory backend is in-process: no link
			n.Proxy = faultproxy.Start(t, b.Target)
			b.watchStop(func(stop bool) {
				if stop {
					n.Proxy.Cut()
				} else {
					n.Proxy.Heal()
				}
			})
		}
		c.nodes = append(c.nodes, n)
	}
	if !spec.Manual {
		for _, n := range c.nodes {
			n.Start()
		}
	}
	return c
}

// Nodes returns the cluster's nodes.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.nodes...)
}

// Node returns the node with id.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes() {
		if n.ID == id {
			return n
		}
	}
	c.t.Fatalf("no node %q", id)
	return nil
}

// Start starts the node's process and waits until it serves metrics.
func (n *Node) Start() {
	t := n.c.t
	t.Helper()
	var env []string
	if n.Proxy != nil {
		env = append(env, "E2E_BACKEND_ADDR="+n.Proxy.Addr())
	}
	if n.offset != 0 {
		env = append(env, "BEXT_TEST_CLOCK_OFFSET="+n.offset.String())
	}
	p := proctest.Start(t, bextBin, env, "run", "--config", n.c.config, "--node-id", n.ID,
		"--listen", "127.0.0.1:0")
	m := p.WaitLog(servingRe, 60*time.Second)
	n.mu.Lock()
	n.proc, n.addr = p, m[1]
	n.procs = append(n.procs, p)
	n.mu.Unlock()
}

// skipRe matches a node's log line for a global tick skipped, with the
// tick and the outcome.
var skipRe = regexp.MustCompile(`msg="tick skipped".* schedule=` + globalID + ` tick=(\S+) outcome=(\S+)`)

// SkippedTicks returns, for each global tick some node logged as skipped
// with one of outcomes, the nodes that did ("node-1:backend_error"), by
// the tick's Unix time (a time.Time key would tell zones apart).
func (c *Cluster) SkippedTicks(outcomes ...string) map[int64][]string {
	out := map[int64][]string{}
	for _, n := range c.Nodes() {
		n.mu.Lock()
		procs := append([]*proctest.Node(nil), n.procs...)
		n.mu.Unlock()
		for _, p := range procs {
			for _, l := range strings.Split(p.Log(), "\n") {
				m := skipRe.FindStringSubmatch(l)
				if m == nil || !slices.Contains(outcomes, m[2]) {
					continue
				}
				tick, err := time.Parse(time.RFC3339, m[1])
				if err != nil {
					continue
				}
				out[tick.Unix()] = append(out[tick.Unix()], n.ID+":"+m[2])
			}
		}
	}
	return out
}

// Proc is the node's current process.
func (n *Node) Proc() *proctest.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// Kill sends SIGKILL to the node process alone (its jobs run in groups of
// their own, as they would on a real host) and waits for it to exit.
func (n *Node) Kill() {
	t := n.c.t
	t.Helper()
	p := n.Proc()
	p.Signal(syscall.SIGKILL)
	p.Wait(30 * time.Second)
	n.mu.Lock()
	n.proc = nil
	n.mu.Unlock()
	// Its unfinished runs never end in the ledger: Holder must not take
	// them for running ones.
	c := n.c
	for _, r := range ledger.Runs(c.Records()) {
		if r.Node == n.ID && r.Ending == "" {
			c.mu.Lock()
			if c.dead == nil {
				c.dead = map[int]bool{}
			}
			c.dead[r.PID] = true
			c.mu.Unlock()
		}
	}
}

// Stop sends SIGTERM and waits for a clean exit (code 0).
func (n *Node) Stop() {
	t := n.c.t
	t.Helper()
	p := n.Proc()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(60 * time.Second); code != 0 {
		t.Fatalf("%s exited with %d after SIGTERM, want 0", n.ID, code)
	}
	n.mu.Lock()
	n.proc = nil
	n.mu.Unlock()
}

// Pause stops the node process with SIGSTOP; with jobs too, every job
// process group it started is stopped as well (the whole host paused).
// It returns the job groups it stopped, for Resume.
func (n *Node) Pause(jobs bool) []int {
	t := n.c.t
	t.Helper()
	p := n.Proc()
	var groups []int
	if jobs {
		groups = jobGroups(p.Cmd.Process.Pid)
	}
	p.Signal(syscall.SIGSTOP)
	for _, g := range groups {
		_ = syscall.Kill(-g, syscall.SIGSTOP)
	}
	if jobs { // a job started between the listing and the stop
		for _, g := range jobGroups(p.Cmd.Process.Pid) {
			if !contains(groups, g) {
				_ = syscall.Kill(-g, syscall.SIGSTOP)
				groups = append(groups, g)
			}
		}
	}
	return groups
}

// Resume continues the node and the job groups Pause stopped, jobs first
// as a resumed host would run them all at once.
func (n *Node) Resume(groups []int) {
	t := n.c.t
	t.Helper()
	for _, g := range groups {
		_ = syscall.Kill(-g, syscall.SIGCONT)
	}
	n.Proc().Signal(syscall.SIGCONT)
}

// Metrics scrapes the node's /metrics.
func (n *Node) Metrics() (map[string]*dto.MetricFamily, error) {
	n.mu.Lock()
	addr := n.addr
	n.mu.Unlock()
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// get requests path on the node's HTTP server and returns the status.
func (n *Node) get(path string) (int, error) {
	n.mu.Lock()
	addr := n.addr
	n.mu.Unlock()
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Counter returns the sum of metric name's series whose labels include
// all of labels (pairs of name, value), on the node's current process.
func (n *Node) Counter(name string, labels ...string) float64 {
	t := n.c.t
	t.Helper()
	mfs, err := n.Metrics()
	if err != nil {
		t.Fatalf("%s: %v", n.ID, err)
	}
	return sumSeries(mfs, name, labels...)
}

func sumSeries(mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	mf := mfs[name]
	if mf == nil {
		return 0
	}
	sum := 0.0
	for _, m := range mf.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Records reads the ledger.
func (c *Cluster) Records() []ledger.Record {
	c.t.Helper()
	recs, err := c.Res.Read()
	if err != nil {
		c.t.Fatal(err)
	}
	return recs
}

// WaitRuns polls the ledger until cond holds for the global schedule's
// finished runs, failing after timeout.
func (c *Cluster) WaitRuns(what string, timeout time.Duration, cond func([]ledger.Run) bool) []ledger.Run {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var runs []ledger.Run
		for _, r := range ledger.Runs(c.Records()) {
			if r.Schedule == globalID {
				runs = append(runs, r)
			}
		}
		if cond(runs) {
			return runs
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("waiting %v for %s: %d runs so far:\n%s", timeout, what, len(runs), describeRuns(runs))
		}
		<-tick.C
	}
}

// WaitTicks waits until the global schedule has run n more ticks (ends
// written) than it had when called.
func (c *Cluster) WaitTicks(n int, timeout time.Duration) {
	c.t.Helper()
	start := len(c.ended())
	c.WaitRuns(fmt.Sprintf("%d more runs", n), timeout, func(runs []ledger.Run) bool {
		ended := 0
		for _, r := range runs {
			if r.Ending != "" {
				ended++
			}
		}
		return ended >= start+n
	})
}

func (c *Cluster) ended() []ledger.Run {
	var out []ledger.Run
	for _, r := range ledger.Runs(c.Records()) {
		if r.Schedule == globalID && r.Ending != "" {
			out = append(out, r)
		}
	}
	return out
}

// WaitMetric polls every node in nodes until cond holds for the value of
// metric name (summed over series with labels), failing after timeout.
func WaitMetric(t testing.TB, nodes []*Node, timeout time.Duration, name string, cond func(float64) bool, labels ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var bad []string
		for _, n := range nodes {
			mfs, err := n.Metrics()
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", n.ID, err))
				continue
			}
			if v := sumSeries(mfs, name, labels...); !cond(v) {
				bad = append(bad, fmt.Sprintf("%s: %v", n.ID, v))
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v not as wanted within %v: %s", name, labels, timeout, strings.Join(bad, ", "))
		}
		<-tick.C
	}
}

// Holder waits for a node whose global job is running now (a begin
// without an end in the ledger) and returns it with that run.
func (c *Cluster) Holder(timeout time.Duration) (*Node, ledger.Run) {
	c.t.Helper()
	var run ledger.Run
	c.WaitRuns("a running global job", timeout, func(runs []ledger.Run) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, r := range runs {
			if r.Ending == "" && r.Begin == ledger.Accepted && !c.dead[r.PID] {
				run = r
				return true
			}
		}
		return false
	})
	return c.Node(run.Node), run
}

func describeRuns(runs []ledger.Run) string {
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "  %s tick %s fence %d %s..%s begin %s end %q\n", r.Node, r.Tick.UTC().Format("15:04:05"),
			r.Fence, r.Start.UTC().Format("15:04:05.000"), r.End.UTC().Format("15:04:05.000"), r.Begin, r.Ending)
	}
	return b.String()
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
