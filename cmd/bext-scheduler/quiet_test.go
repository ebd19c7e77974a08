package main

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// Only `run` warns about the backend's durability (the test Redis runs
// without persistence, so it would): `lock run` from a crontab line on
// every host, `locks` and the operators' commands print nothing on stderr
// when all is well, or cron mails the warning every night from every host.
func TestCommandsQuietOnStderr(t *testing.T) {
	t.Parallel()
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			cfg := writeFile(t, t.TempDir(), "bext.config.toml", "node_id = \"cli\"\n[http]\nlisten = \"off\"\n"+lockingTOML+opsSchedules)
			takeRequests(t, st, "job", "node-a")
			for _, args := range [][]string{
				{"lock", "run", "--config", cfg, "--key", "quiet", "--ttl", "5s", "--", "/bin/true"},
				{"locks", "--config", cfg},
				{"status", "--config", cfg},
				{"history", "job", "--config", cfg},
				{"pause", "job", "--note", "quiet", "--config", cfg},
				{"resume", "job", "--config", cfg},
				{"trigger", "job", "--config", cfg},
				{"audit", "--config", cfg},
				{"audit", "job", "--from", "1h", "--config", cfg},
			} {
				r := proctest.Run(t, bin, nil, args...)
				if r.Code != 0 || r.Stderr != "" {
					t.Errorf("%s: exit %d, stderr %q; want 0 and nothing", strings.Join(args[:2], " "), r.Code, r.Stderr)
				}
			}
		})
	}
}

// A command that cannot be started exits 127, as in the shell.
func TestLockRunCommandNotFound(t *testing.T) {
	t.Parallel()
	cfg, _ := lockBackends[0].setup(t)
	r := proctest.Run(t, bin, nil, "lock", "run", "--config", cfg, "--key", "nf", "--ttl", "5s", "--", "/no/such/command")
	if r.Code != 127 || !strings.Contains(r.Stderr, "/no/such/command") {
		t.Errorf("exit %d, stderr %q; want 127 naming the command", r.Code, r.Stderr)
	}
	noCrash(t, r)
}

// `run` still says it, once at start: a node is where it belongs.
func TestRunWarnsRedisDurability(t *testing.T) {
	t.Parallel()
	lockingTOML, _ := opstest.Shared()[0].New(t)
	cfg := writeFile(t, t.TempDir(), "bext.config.toml", "node_id = \"warn\"\n[http]\nlisten = \"off\"\n"+lockingTOML+opsSchedules)
	n := proctest.Start(t, bin, nil, "run", "--config", cfg)
	n.WaitLog(regexp.MustCompile(`redis may lose locks or tick marks: locking/redis: persistence is off`), 30*time.Second)
	n.WaitLog(regexp.MustCompile(`bext-scheduler started`), 30*time.Second) // its signals handled
	n.Signal(syscall.SIGTERM)
	if code := n.Wait(30 * time.Second); code != 0 {
		t.Errorf("run exit %d\n%s", code, n.Log())
	}
}
