package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/jobs"
)

const unitPath = "deploy/systemd/bext-scheduler.service"

// unit parses a systemd unit: section → key → values, in order (a key may
// repeat, as Environment= does).
func unit(t *testing.T) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	section := ""
	for i, l := range strings.Split(readRepoFile(t, unitPath), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = l[1 : len(l)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is not key=value in a section", unitPath, i+1, l)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func TestSystemdUnit(t *testing.T) {
	u := unit(t)
	svc := u["Service"]
	one := func(key string) string {
		t.Helper()
		if len(svc[key]) != 1 {
			t.Errorf("[Service] %s is set %d times, want once", key, len(svc[key]))
			return ""
		}
		return svc[key][0]
	}
	for key, want := range map[string]string{
		"Restart":         "on-failure",
		"KillMode":        "mixed",
		"NoNewPrivileges": "yes",
		"ProtectSystem":   "strict",
		"ExecReload":      "/bin/kill -HUP $MAINPID",
	} {
		if got := one(key); got != want {
			t.Errorf("[Service] %s=%s, want %s", key, got, want)
		}
	}
	if user := one("User"); user == "" || user == "root" || user == "0" {
		t.Errorf("User=%q: run as a dedicated unprivileged user", user)
	}
	if !strings.HasSuffix(one("ExecStart"), " run") {
		t.Errorf("ExecStart=%q does not run the service", svc["ExecStart"])
	}
	// One documented config path, the same as the image's.
	df := loadDockerfile(t)
	if got, want := strings.Join(svc["Environment"], " "), "BEXT_CONFIG="+df.env["BEXT_CONFIG"]; !strings.Contains(got, want) {
		t.Errorf("Environment=%q lacks %s", got, want)
	}
	if !strings.Contains(strings.Join(u["Install"]["WantedBy"], " "), "multi-user.target") {
		t.Error("[Install] WantedBy lacks multi-user.target")
	}

	// systemd must wait longer than the node does at shutdown, or it kills
	// jobs the node is still waiting for (and the lock release after them).
	t.Setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
	t.Setenv("TOKEN", "t")
	t.Setenv("BEXT_API_READ_TOKEN", "r")
	t.Setenv("BACKUP_DB_PASSWORD", "p")
	cfg, err := config.Load(repo("examples/cluster.config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	stop, err := time.ParseDuration(one("TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	if need := cfg.ShutdownGrace.Duration + jobs.DefaultKillGrace; stop <= need {
		t.Errorf("TimeoutStopSec=%v, want more than shutdown_grace %v + job kill grace %v",
			stop, cfg.ShutdownGrace.Duration, jobs.DefaultKillGrace)
	}
}

// TestSystemdAnalyzeVerify asks systemd itself, when systemd-analyze is
// installed, with the binary path pointed at the test's build (verify
// insists the executable exists). verify exits 0 on a bad value and only
// prints a warning, so any output is a failure.
func TestSystemdAnalyzeVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not on PATH; TestSystemdUnit checked the unit without it")
	}
	body := strings.ReplaceAll(readRepoFile(t, unitPath), "/usr/local/bin/bext-scheduler", bin)
	p := filepath.Join(t.TempDir(), "bext-scheduler.service")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", p).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
