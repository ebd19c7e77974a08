package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// bin is the binary under test, built with -race: the CLI tests and the
// single-node tests run it, so the node's own code is race-checked in a
// real process. nodeBin is built without -race (and with the test hooks,
// unset): the cluster tests' nodes (opsCluster) run it. Three -race nodes
// per cluster test, each re-executing itself as the supervisor of a job
// every second, were what kept this package's tests one or two at a
// time: beside the Postgres package's tests they starved the shared
// server's connection starts and a node's renewal. The packages the
// cluster paths run (agent, scheduler, the backends) are race-tested by
// their own tests, as e2e's nodes are.
var bin, nodeBin string

// testParallel is how many tests run at once unless -parallel says
// otherwise. Most of this package's tests start node processes and wait
// for wall-clock ticks, so GOMAXPROCS (go test's default) would leave the
// machine idle; every test has its own key prefix, Postgres namespace and
// directory, so they never see each other's state.
const testParallel = 6

func TestMain(m *testing.M) {
	proctest.DefaultParallel(testParallel)
	proctest.Main(m, &bin, &nodeBin)
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// noCrash asserts a failing command explained itself and did not panic.
func noCrash(t *testing.T, r proctest.Result) {
	t.Helper()
	if strings.Contains(r.Stderr, "panic") || strings.Contains(r.Stderr, "goroutine ") {
		t.Fatalf("crashed:\n%s", r.Stderr)
	}
	if strings.TrimSpace(r.Stderr) == "" {
		t.Fatal("failed without saying why on stderr")
	}
}

func TestValidateExampleConfig(t *testing.T) {
	t.Parallel()
	r := proctest.Run(t, bin, nil, "validate", "--config", "../../examples/bext.config.toml")
	if r.Code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "ok") {
		t.Fatalf("stdout %q does not say ok", r.Stdout)
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	r := proctest.Run(t, bin, []string{"BEXT_CONFIG=../../examples/bext.config.toml"}, "validate")
	if r.Code != 0 {
		t.Fatalf("exit %d with BEXT_CONFIG set, want 0\n%s", r.Code, r.Stderr)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"frobnicate"},
		{"validate", "--no-such-flag"},
		{"validate", "extra-arg"},
		{"next", "-n", "0", "--config", "../../examples/bext.config.toml"},
		{"run", "--config"},
		{"run", "--config", "../../examples/bext.config.toml", "--listen", "nonsense"},
		{"run", "--config", "../../examples/bext.config.toml", "--listen", "127.0.0.1:99999"},
	} {
		r := proctest.Run(t, bin, nil, args...)
		if r.Code != exitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", args, r.Code, exitUsage, r.Stderr)
		}
		noCrash(t, r)
	}
}

func TestBadConfigFilesExit2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	junk := make([]byte, 4096)
	for i := range junk {
		junk[i] = byte(i*7 + 3)
	}
	big := strings.Repeat("# padding padding padding padding padding padding\n", 10<<20/50)
	for name, path := range map[string]string{
		"missing":   filepath.Join(dir, "nope.toml"),
		"empty":     writeFile(t, dir, "empty.toml", ""),
		"directory": dir,
		"junk":      writeFile(t, dir, "junk.toml", string(junk)),
		"10MB":      writeFile(t, dir, "big.toml", big),
		"bad cron": writeFile(t, dir, "badcron.toml", `
[[scheduled]]
id = "x"
cron = "61 * * * *"
command = ["true"]
`),
		"unknown notify event": writeFile(t, dir, "badevent.toml", `
[notify]
url = "https://hooks.example/x"
events = ["failure", "overruns"]
[[scheduled]]
id = "x"
cron = "@hourly"
command = ["true"]
`),
	} {
		for _, cmd := range []string{"validate", "run", "next"} {
			r := proctest.Run(t, bin, nil, cmd, "--config", path)
			if r.Code != exitUsage {
				t.Errorf("%s %s: exit %d, want %d\n%s", cmd, name, r.Code, exitUsage, r.Stderr)
				continue
			}
			noCrash(t, r)
			if name == "unknown notify event" && !strings.Contains(r.Stderr, `notify.events: unknown event "overruns"`) {
				t.Errorf("%s %s: stderr does not name the key and the value:\n%s", cmd, name, r.Stderr)
			}
		}
	}
}

func TestValidateReportsEveryProblemWithLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := writeFile(t, dir, "bad.toml", `[locking]
backend = "memory"

[[scheduled]]
id = "a"
cron = "not a cron"
command = ["true"]

[[scheduled]]
id = "b"
cron = "* * * * *"
hint = "sometimes_global"
command = ["true"]
expected_runtime = "ten minutes"
`)
	r := proctest.Run(t, bin, nil, "validate", "--config", p)
	if r.Code != exitUsage {
		t.Fatalf("exit %d, want 2\n%s", r.Code, r.Stderr)
	}
	for _, want := range []string{"bad.toml:6", "bad.toml:12", "bad.toml:14"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
}

func TestNextPrintsPlan(t *testing.T) {
	t.Parallel()
	r := proctest.Run(t, bin, nil, "next", "-n", "2", "--config", "../../examples/bext.config.toml")
	if r.Code != 0 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	// hello's TTL: 1s expected + 5s margin, raised to 2×1s skew + 5s margin.
	for _, want := range []string{"SCHEDULE", "hello", "*/5 * * * * *", "require_global", "node_local", " 6s "} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("next output lacks %q:\n%s", want, r.Stdout)
		}
	}
	stamps := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`).FindAllString(r.Stdout, -1)
	if len(stamps) != 4 { // 2 schedules × 2 ticks
		t.Errorf("want 4 RFC 3339 tick times, got %d:\n%s", len(stamps), r.Stdout)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := proctest.Run(t, bin, nil, "version")
	if r.Code != 0 || !strings.Contains(r.Stdout, "bext-scheduler") || !strings.Contains(r.Stdout, "go1.") {
		t.Fatalf("exit %d, stdout %q", r.Code, r.Stdout)
	}
}

var addrRE = regexp.MustCompile(`serving metrics and health.*addr=(\S+)`)

// TestRunEndToEnd runs the service on an every-second schedule: the command
// job runs several times, /metrics counts it and passes promlint, and
// SIGTERM exits 0 within the grace period, the running job's process group
// gone.
func TestRunEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "bext.config.toml", `
node_id = "e2e"
shutdown_grace = "1s"
[http]
listen = "127.0.0.1:0"
[locking]
backend = "memory"
[[scheduled]]
id = "every-second"
cron = "*/1 * * * * *"
hint = "require_global"
expected_runtime = "1s"
command = ["/bin/sh", "-c", "echo ran-tick=$BEXT_TICK_TIME fence=$BEXT_FENCING_TOKEN"]
[[scheduled]]
id = "long"
cron = "*/1 * * * * *"
hint = "node_local"
command = ["/bin/sh", "-c", "echo long-pgid=$$; sleep 60 & wait"]
`)
	n := proctest.Start(t, bin, nil, "run", "--config", cfg)
	addr := n.WaitLog(addrRE, 30*time.Second)[1]
	n.WaitLogN(regexp.MustCompile(`ran-tick=\d{4}-`), 3, 30*time.Second)
	pgid, err := strconv.Atoi(n.WaitLog(regexp.MustCompile(`long-pgid=(\d+)`), 10*time.Second)[1])
	if err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, re := range []string{
		`bext_scheduler_ticks_total\{schedule="every-second"\} ([3-9]|\d\d+)`,
		`bext_scheduler_runs_total\{result="success",schedule="every-second"\} ([2-9]|\d\d+)`,
		`bext_locking_operations_total\{backend="memory",op="try_lock",result="acquired"\} [1-9]`,
		`bext_scheduler_build_info\{`,
		`bext_notify_dropped_total\{kind="ping"\} 0`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("/metrics lacks %s", re)
		}
	}
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		r, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Errorf("%s: %d, want 200", path, r.StatusCode)
		}
	}

	n.Signal(syscall.SIGTERM)
	if code := n.Wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
	if alive, err := proctest.GroupAlive(pgid); err != nil || alive {
		t.Fatalf("job process group %d still has live processes after shutdown (err %v)", pgid, err)
	}
}
