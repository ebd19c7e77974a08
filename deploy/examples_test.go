package deploy_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/hints"
)

// clusterEnv is what examples/cluster.config.toml and examples/jobs need
// from the environment.
var clusterEnv = map[string]string{
	"REDIS_URL":           "redis://:secret@127.0.0.1:6379/0",
	"TOKEN":               "example-token",
	"BEXT_API_READ_TOKEN": "example-read-token",
	"BACKUP_DB_PASSWORD":  "example-password",
}

func TestClusterExampleValidates(t *testing.T) {
	cfgPath := repo("examples/cluster.config.toml")
	r := runBin(t, clusterEnv, "validate", "--config", cfgPath)
	if r.Code != 0 || !strings.Contains(r.Stdout, "backend redis") {
		t.Fatalf("validate: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	// The secrets come from the environment: without it, loading fails
	// naming each missing variable, and never prints a value.
	r = runBin(t, nil, "validate", "--config", cfgPath)
	if r.Code != 2 {
		t.Fatalf("validate without the environment: exit %d, want 2\n%s", r.Code, r.Stderr)
	}
	for name := range clusterEnv {
		if !strings.Contains(r.Stderr, name) {
			t.Errorf("validate without %s does not name it:\n%s", name, r.Stderr)
		}
	}
	r = runBin(t, clusterEnv, "next", "-n", "1", "--config", cfgPath)
	if r.Code != 0 || strings.Contains(r.Stdout+r.Stderr, "secret") {
		t.Errorf("next: exit %d, or it shows the Redis password:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}

// TestExampleJobsCoverEveryKind: every file in examples/jobs is included by
// the cluster example and valid, and together they show each hint, both job
// kinds, a time zone, and a long locked job with jitter and a timeout.
func TestExampleJobsCoverEveryKind(t *testing.T) {
	for k, v := range clusterEnv {
		t.Setenv(k, v)
	}
	cfg, err := config.Load(repo("examples/cluster.config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(repo("examples/jobs/*.toml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("examples/jobs: %v, %d files", err, len(files))
	}
	perFile := map[string]int{}
	for _, s := range cfg.Scheduled {
		perFile[filepath.Base(s.File)]++
	}
	for _, f := range files {
		if perFile[filepath.Base(f)] == 0 {
			t.Errorf("%s declares no schedule the cluster example loads", f)
		}
	}
	var hintsSeen []hints.Hint
	var http, zoned, longLocked bool
	for _, s := range cfg.Scheduled {
		hintsSeen = append(hintsSeen, s.HintValue)
		if s.HTTP != nil {
			for _, v := range s.HTTP.Headers {
				http = http || strings.Contains(v, clusterEnv["TOKEN"])
			}
		}
		zoned = zoned || (s.Location != nil && s.Location.String() != "UTC")
		longLocked = longLocked || (s.HintValue == hints.RequireGlobal && s.Jitter.Duration > 0 &&
			s.Timeout.Duration > s.ExpectedRuntime.Duration && s.ExpectedRuntime.Duration >= 10*time.Minute)
	}
	for _, h := range []hints.Hint{hints.NodeLocal, hints.RequireGlobal, hints.PreferGlobal} {
		if !slices.Contains(hintsSeen, h) {
			t.Errorf("no example job uses hint %v", h)
		}
	}
	if !http {
		t.Error("no example HTTP job with a ${TOKEN} header")
	}
	if !zoned {
		t.Error("no example job in a time zone")
	}
	if !longLocked {
		t.Error("no example require_global job with a long expected_runtime, jitter and a timeout")
	}
}

// TestQuickstartExample: make run-example's config stays a memory-backend
// node whose only jobs are the two quick ones (cmd's tests count on it).
func TestQuickstartExample(t *testing.T) {
	cfg, err := config.Load(repo("examples/bext.config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Locking.Backend != config.BackendMemory {
		t.Errorf("backend %q, want memory", cfg.Locking.Backend)
	}
	var ids []string
	for _, s := range cfg.Scheduled {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"hello", "node-heartbeat"}) {
		t.Errorf("schedules %v, want hello and node-heartbeat", ids)
	}
}

func TestDemoScriptParses(t *testing.T) {
	if out, err := exec.Command("bash", "-n", repo("scripts/demo")).CombinedOutput(); err != nil {
		t.Fatalf("bash -n scripts/demo: %v\n%s", err, out)
	}
}
