//go:build figures

package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/jobs"
)

// loadWarmup is how long a loaded cluster runs after its last node is
// ready before the window may open: the first history writes are not the
// steady state.
const loadWarmup = 5 * time.Second

// After ready a node tries the start's catch-up, one try-lock-tick per
// locked schedule (docs/OPERATING.md); at 100,000 schedules the on-time
// ticks queue behind those tries for tens of seconds. The window opens
// once the cluster has settled: the runs that reached the endpoint in the
// last second were, at the median, less than settledLateness late; or
// after settleCap, measured as it is then.
const (
	settledLateness = time.Second
	settleCap       = 90 * time.Second
)

// loadGrace is how long after the window closes runs of its ticks are
// still counted; a tick whose run arrives later counts as missed.
const loadGrace = 5 * time.Second

// loadSpec is one measured cluster: nodes nodes, each holding schedules
// schedules that fire every period, schedule i at offset(i) seconds into
// it, all require_global, all calling the harness's HTTP endpoint.
type loadSpec struct {
	kind      string
	nodes     int
	schedules int
	period    int // seconds: 60 (every minute) or 1 (every second)
	window    time.Duration
}

func (s loadSpec) cron(i int) string {
	if s.period == 1 {
		return "* * * * * *"
	}
	return fmt.Sprintf("%d * * * * *", i%60)
}

// fires reports whether schedule i has a tick at second sec.
func (s loadSpec) fires(i int, sec int64) bool {
	if s.period == 1 {
		return true
	}
	return int(sec%60) == i%60
}

// loadResult is what one cluster showed over its window.
type loadResult struct {
	spec      loadSpec
	lateness  []time.Duration // per run of a tick in the window: request at the endpoint − tick
	expected  int             // ticks in the window
	ticks     int             // of them, ticks run (at least once) within the grace
	doubles   int             // ticks run more than once
	ready     time.Duration   // the slowest node's start to /readyz 200
	settle    time.Duration   // from the last node ready to the window's opening
	settled   bool            // false: settleCap passed first
	rss       []float64       // per node, bytes, at the window's end
	cpu       []float64       // per node, CPU seconds per second over the window
	ops       float64         // backend commands (Redis) or transactions (Postgres) in the window
	scripts   float64         // Redis script calls in the window
	serverCPU float64         // backend server CPU seconds in the window
	failed    bool
}

// sink is the HTTP endpoint every schedule's job calls: it records when
// each request arrived, with the tick it is for.
type sink struct {
	srv  *http.Server
	url  string
	mu   sync.Mutex
	runs []sinkRun
}

type sinkRun struct {
	id, node string
	tick, at time.Time
}

func startSink(t *testing.T) *sink {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{url: "http://" + l.Addr().String() + "/run"}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		tick, err := time.Parse(time.RFC3339, r.Header.Get(jobs.HeaderTickTime))
		if err != nil {
			http.Error(w, "no tick", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.runs = append(s.runs, sinkRun{id: r.Header.Get(jobs.HeaderScheduleID), node: r.Header.Get(jobs.HeaderNodeID), tick: tick, at: at})
		s.mu.Unlock()
	})}
	go func() {
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("sink: %v", err)
		}
	}()
	t.Cleanup(func() { s.srv.Close() })
	return s
}

func (s *sink) snapshot() []sinkRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sinkRun(nil), s.runs...)
}

var loadSeq int

// runLoad starts spec's cluster, lets it warm up, measures it over its
// window and stops it.
func runLoad(t *testing.T, priv *privateBackends, spec loadSpec) loadResult {
	t.Helper()
	res := loadResult{spec: spec}
	loadSeq++
	name := fmt.Sprintf("fig%d_%d", loadSeq, time.Now().UnixNano()%1e9)
	b := priv.get(t, spec.kind, name)
	sk := startSink(t)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "bext.config.toml")
	var body strings.Builder
	fmt.Fprintf(&body, "shutdown_grace = \"2s\"\n[log]\nlevel = \"info\"\n%s", b.section)
	for i := range spec.schedules {
		fmt.Fprintf(&body, "[[scheduled]]\nid = \"s%06d\"\ncron = %q\nhint = \"require_global\"\n[scheduled.http]\nurl = %q\n",
			i, spec.cron(i), sk.url)
	}
	writeFile(t, cfg, body.String())

	// A cluster of the e2e kind without its ledger job: the nodes are
	// the e2e Nodes (Start, waitReady), the config is this one.
	c := &Cluster{t: t, config: cfg}
	for i := range spec.nodes {
		c.nodes = append(c.nodes, &Node{ID: fmt.Sprintf("node-%d", i+1), c: c})
	}
	for _, n := range c.nodes {
		start := time.Now()
		n.Start()
		waitReady(t, n, 5*time.Minute)
		res.ready = max(res.ready, time.Since(start))
	}
	defer func() {
		for _, n := range c.nodes {
			p := n.Proc()
			p.Signal(syscall.SIGKILL)
			p.Wait(30 * time.Second)
		}
	}()

	allReady := time.Now()
	res.settled = waitSettled(sk, allReady.Add(loadWarmup), allReady.Add(settleCap))
	w0 := time.Now().Truncate(time.Second).Add(time.Second)
	res.settle = w0.Sub(allReady)
	w1 := w0.Add(spec.window)
	time.Sleep(time.Until(w0)) // the window's wall-clock start, by design
	st0 := b.stats()
	cpu0 := nodesCPU(c)
	time.Sleep(time.Until(w1))
	st1 := b.stats()
	cpu1 := nodesCPU(c)
	secs := spec.window.Seconds()
	for i, n := range c.nodes {
		res.rss = append(res.rss, procRSS(n.Proc().Cmd.Process.Pid))
		res.cpu = append(res.cpu, (cpu1[i]-cpu0[i])/secs)
	}
	res.ops, res.scripts, res.serverCPU = st1.ops-st0.ops, st1.scripts-st0.scripts, st1.cpu-st0.cpu
	time.Sleep(time.Until(w1.Add(loadGrace))) // late runs of the window's ticks still count

	for sec := w0.Unix(); sec < w1.Unix(); sec++ {
		for i := range spec.schedules {
			if spec.fires(i, sec) {
				res.expected++
			}
		}
	}
	type key struct {
		id   string
		tick int64
	}
	seen := map[key]int{}
	for _, r := range sk.snapshot() {
		if r.tick.Before(w0) || !r.tick.Before(w1) || r.at.After(w1.Add(loadGrace)) {
			continue
		}
		k := key{r.id, r.tick.Unix()}
		seen[k]++
		if seen[k] == 2 {
			res.doubles++
		}
		res.lateness = append(res.lateness, r.at.Sub(r.tick))
	}
	res.ticks = len(seen)
	t.Logf("%s %d nodes %d schedules: settled %v after %v; %d/%d ticks run, %d doubles, lateness p50 %v p99 %v, ready %v, rss %v, cpu %v, ops %.0f (scripts %.0f), server cpu %.2fs",
		spec.kind, spec.nodes, spec.schedules, res.settled, res.settle, res.ticks, res.expected, res.doubles, percentile(res.lateness, 50),
		percentile(res.lateness, 99), res.ready, res.rss, res.cpu, res.ops, res.scripts, res.serverCPU)
	return res
}

// waitSettled waits until from, then until the runs that reached the
// endpoint in the last second were at the median less than
// settledLateness late, or until limit; it reports whether they were.
func waitSettled(sk *sink, from, limit time.Time) bool {
	time.Sleep(time.Until(from)) // the warm-up, by design
	poll := time.NewTicker(500 * time.Millisecond)
	defer poll.Stop()
	for {
		now := time.Now()
		var recent []time.Duration
		for _, r := range sk.snapshot() {
			if r.at.After(now.Add(-time.Second)) {
				recent = append(recent, r.at.Sub(r.tick))
			}
		}
		if len(recent) > 0 && percentile(recent, 50) < settledLateness {
			return true
		}
		if now.After(limit) {
			return false
		}
		<-poll.C
	}
}

func nodesCPU(c *Cluster) []float64 {
	var out []float64
	for _, n := range c.nodes {
		out = append(out, procCPU(n.Proc().Cmd.Process.Pid))
	}
	return out
}

// loadConfigs lists the lateness/sizing clusters: memory on one node
// (it is one process), Redis and Postgres on 1 and 3.
func loadConfigs(sizes []int, window time.Duration) []loadSpec {
	var out []loadSpec
	for _, n := range sizes {
		out = append(out, loadSpec{kind: "memory", nodes: 1, schedules: n, period: 60, window: window})
		for _, kind := range backendKinds {
			for _, nodes := range []int{1, 3} {
				out = append(out, loadSpec{kind: kind, nodes: nodes, schedules: n, period: 60, window: window})
			}
		}
	}
	return out
}

// figuresLoad measures lateness and sizing from the same runs.
func figuresLoad(t *testing.T, priv *privateBackends) (lateness, sizing string) {
	sizes := []int{1000, 10000, 100000}
	if v := os.Getenv("FIGURES_SIZES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				t.Fatalf("FIGURES_SIZES=%q: want positive integers", v)
			}
			sizes = append(sizes, n)
		}
	}
	window := time.Duration(envInt(t, "FIGURES_WINDOW", 15)) * time.Second
	var results []loadResult
	for _, spec := range loadConfigs(sizes, window) {
		res := loadResult{spec: spec, failed: true}
		t.Run(fmt.Sprintf("%s-%dnodes-%d", spec.kind, spec.nodes, spec.schedules), func(t *testing.T) {
			res = runLoad(t, priv, spec)
		})
		results = append(results, res)
	}
	return renderLateness(results, window), renderSizing(results, window)
}

func renderLateness(results []loadResult, window time.Duration) string {
	var b strings.Builder
	b.WriteString("## Lateness\n\n")
	fmt.Fprintf(&b, `How late a job starts: for each run, the time its HTTP request reached the
harness's endpoint minus the tick's scheduled time T (the job's
`+"`X-Bext-Tick-Time`"+` header). Exact samples, not histogram buckets. The job is
an HTTP job (no process to start, so the figure is the scheduler's and the
backend's, plus one local HTTP request); a command job adds its process
start on top.

The mix: N schedules per node, all require_global, **every minute, schedule
i at second i mod 60**, so N/60 ticks fall in each second (a steady load, not
a same-second burst). Every node of a cluster holds the same N schedules
(the cluster runs each tick once). Defaults otherwise (safety_margin 5s,
handoff_delay 250ms, [history] keep 100, audit every minute). Redis and
Postgres are private instances (a redis-server without persistence; a
Postgres 15 from initdb, defaults). After the last node is ready the cluster
runs at least %v and until it has **settled**: after ready each node tries
the start's catch-up, one try-lock-tick per schedule (docs/OPERATING.md),
and the on-time ticks queue behind it, so the window opens only once the
runs that reached the endpoint in the last second were at the median less
than %v late (or after %v, then marked "no"; "settle" is from the
last node ready to the window's opening). Then every tick in a %v window
is counted; a run that reaches the endpoint more than %v after the window
closes counts as not run.
"ticks run" is ticks with a run out of ticks in the window; "doubles" is
ticks run twice (should be 0).

| backend | nodes | schedules | settle | runs sampled | ticks run | doubles | p50 | p99 | max |
|---|---|---|---|---|---|---|---|---|---|
`, loadWarmup, settledLateness, settleCap, window, loadGrace)
	for _, r := range results {
		s := r.spec
		if r.failed {
			fmt.Fprintf(&b, "| %s | %d | %s | not measured: the run failed (see the test log) | | | | | | |\n", backendName(s.kind), s.nodes, thousands(s.schedules))
			continue
		}
		settle := fmt.Sprintf("%.0f s", r.settle.Seconds())
		if !r.settled {
			settle += " (no)"
		}
		p50, p99, top := "none", "none", "none"
		if len(r.lateness) > 0 {
			p50, p99, top = ms(percentile(r.lateness, 50)), ms(percentile(r.lateness, 99)), ms(percentile(r.lateness, 100))
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %d | %d / %d | %d | %s | %s | %s |\n", backendName(s.kind), s.nodes, thousands(s.schedules),
			settle, len(r.lateness), r.ticks, r.expected, r.doubles, p50, p99, top)
	}
	b.WriteString("\nThe memory backend is one node's process; 3 nodes do not apply to it.\n")
	for _, r := range results {
		if !r.failed && !r.settled {
			fmt.Fprintf(&b, "\nA row whose settle says (no) is a cluster that did not keep up with its load on this machine: "+
				"%v after ready the runs still reached the endpoint at least %v late at the median, and the lateness "+
				"grew instead (a run of a tick due in the window that had not reached the endpoint %v after it closed "+
				"counts as not run, so its \"ticks run\" is low and its percentiles are of the runs that made it, if any).\n",
				settleCap, settledLateness, loadGrace)
			break
		}
	}
	for _, r := range results {
		if r.failed {
			b.WriteString("\nA row \"not measured\" is a run that failed before its window; the test log says why.\n")
			break
		}
	}
	b.WriteString("\n")
	return b.String()
}

func renderSizing(results []loadResult, window time.Duration) string {
	var b strings.Builder
	b.WriteString("## Sizing\n\n")
	fmt.Fprintf(&b, `What a node costs while it runs the lateness section's load (the same runs:
schedules every minute, spread over the seconds; require_global; HTTP jobs).
**RSS** is each node's resident memory at the end of the %v window (the
largest of the cluster's nodes); **CPU** is a node's user + system CPU
seconds per second over the window (the mean of the cluster's nodes; 1.0 is
one core); **ready** is from starting a node to its /readyz answering 200
(the slowest node; nodes start one after the other). **Backend ops/s** is
Redis commands per second (INFO commandstats: every command, those a Lua
script runs included) or Postgres transactions per second (pg_stat_database
xact_commit + xact_rollback; a statement outside a transaction block is one),
for the whole cluster; **backend CPU** is the server's CPU seconds per second
(Redis: INFO cpu; Postgres: /proc of the postmaster and all its processes).

| backend | nodes | schedules | ready | RSS per node | CPU per node | backend ops/s | backend CPU |
|---|---|---|---|---|---|---|---|
`, window)
	secs := window.Seconds()
	for _, r := range results {
		s := r.spec
		if r.failed {
			fmt.Fprintf(&b, "| %s | %d | %s | not measured: the run failed (see the test log) | | | | |\n", backendName(s.kind), s.nodes, thousands(s.schedules))
			continue
		}
		rss, cpu := 0.0, 0.0
		for i := range r.rss {
			rss = max(rss, r.rss[i])
			cpu += r.cpu[i] / float64(len(r.cpu))
		}
		ops, scpu := "n/a", "n/a"
		if s.kind != "memory" {
			ops, scpu = fmt.Sprintf("%.0f", r.ops/secs), fmt.Sprintf("%.3f", r.serverCPU/secs)
		}
		behind := ""
		if !r.settled {
			behind = " (behind)"
		}
		fmt.Fprintf(&b, "| %s | %d | %s%s | %.1f s | %.0f MiB | %.3f | %s | %s |\n", backendName(s.kind), s.nodes, thousands(s.schedules), behind,
			r.ready.Seconds(), rss/(1<<20), cpu, ops, scpu)
	}
	b.WriteString("\nA row marked (behind) is a cluster that did not keep up (settle (no) in the lateness table): its RSS holds " +
		"the backlog, and its CPU and backend rates are what it managed, not what the load asks.\n\n")
	return b.String()
}

// costNodes are the cluster sizes the cost section measures.
var costNodes = []int{1, 3, 5}

// costSchedules every-second require_global schedules make the cost
// section's ticks: enough that the per-node background work (heartbeat,
// audit) is spread over many ticks, as in any real deployment.
const costSchedules = 10

// figuresCost measures backend work per require_global tick.
func figuresCost(t *testing.T, priv *privateBackends) string {
	window := time.Duration(envInt(t, "FIGURES_COST_WINDOW", 15)) * time.Second
	var results []loadResult
	for _, kind := range backendKinds {
		for _, nodes := range costNodes {
			spec := loadSpec{kind: kind, nodes: nodes, schedules: costSchedules, period: 1, window: window}
			res := loadResult{spec: spec, failed: true}
			t.Run(fmt.Sprintf("%s-%dnodes", kind, nodes), func(t *testing.T) {
				res = runLoad(t, priv, spec)
			})
			results = append(results, res)
		}
	}
	var b strings.Builder
	b.WriteString("## Backend cost per tick\n\n")
	fmt.Fprintf(&b, `What one require_global tick costs the backend: %d schedules every second,
require_global, HTTP jobs, on a private server used by this cluster alone,
over a %v window after a %v warm-up. The counts over the window are divided
by the ticks run in it (distinct schedule and tick seen by the endpoint),
so everything the nodes ask of the backend meanwhile (locks, renewals,
releases, history, heartbeats, the audit) is charged to the ticks. **Redis
commands** counts every command the server executed (INFO commandstats), a
command a Lua script runs included, so it is an upper bound of round trips,
and **scripts** the EVAL/EVALSHA/FCALL calls among them (one round trip
each, whatever the script does); **Postgres transactions** is xact_commit + xact_rollback of the nodes'
database (each statement outside a transaction block is one, so a round
trip that runs one statement is one). **Server CPU** is the server's user +
system CPU (Redis: INFO cpu; Postgres: the postmaster and all its processes,
from /proc) per tick, in milliseconds.

| backend | nodes | ticks run | ops per tick | of which scripts | server CPU per tick |
|---|---|---|---|---|---|
`, costSchedules, window, loadWarmup)
	for _, r := range results {
		s := r.spec
		if r.failed || r.ticks == 0 {
			fmt.Fprintf(&b, "| %s | %d | not measured: the run failed (see the test log) | | | |\n", backendName(s.kind), s.nodes)
			continue
		}
		unit, scripts := "Redis commands", fmt.Sprintf("%.1f", r.scripts/float64(r.ticks))
		if s.kind == "pg" {
			unit, scripts = "Postgres transactions", "n/a"
		}
		fmt.Fprintf(&b, "| %s | %d | %d / %d | %.1f %s | %s | %.3f ms |\n", backendName(s.kind), s.nodes, r.ticks, r.expected,
			r.ops/float64(r.ticks), unit, scripts, 1000*r.serverCPU/float64(r.ticks))
	}
	b.WriteString("\nThe memory backend is in the node's process: it has no server to count.\n\n")
	return b.String()
}

// thousands writes n with comma separators.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
