package main

import (
	"os"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

const reloadBase = `
node_id = "hup"
shutdown_grace = "5s"
[http]
listen = "off"
[locking]
backend = "memory"
[[scheduled]]
id = "long"
cron = "*/1 * * * * *"
hint = "require_global"
expected_runtime = "1s"
command = ["/bin/sh", "-c", "echo long-start; sleep 3; echo long-done"]
`

// TestSIGHUPReload: an invalid config is logged and the running one kept;
// a valid one is applied (a new schedule runs) without cutting short the
// job that was running under its lock.
func TestSIGHUPReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "bext.config.toml", reloadBase)
	n := proctest.Start(t, bin, nil, "run", "--config", cfg)
	n.WaitLog(regexp.MustCompile(`line=long-start`), 30*time.Second)

	// Invalid: kept running on the old config.
	if err := os.WriteFile(cfg, []byte(reloadBase+"\n[[scheduled]]\nid = \"bad\"\ncron = \"nope\"\ncommand = [\"true\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.Signal(syscall.SIGHUP)
	n.WaitLog(regexp.MustCompile(`SIGHUP: config is invalid; keeping the running one.*bext.config.toml:\d+`), 30*time.Second)

	// Valid, while "long" is mid-run (it runs 3s of each tick): applied.
	if err := os.WriteFile(cfg, []byte(reloadBase+`
[[scheduled]]
id = "added"
cron = "*/1 * * * * *"
hint = "node_local"
command = ["/bin/sh", "-c", "echo added-ran"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	starts := len(regexp.MustCompile(`line=long-start`).FindAllString(n.Log(), -1))
	n.Signal(syscall.SIGHUP)
	n.WaitLog(regexp.MustCompile(`SIGHUP: config reloaded.*schedules=2`), 30*time.Second)
	n.WaitLog(regexp.MustCompile(`line=added-ran`), 30*time.Second)
	// The run in progress at the reload finishes normally, its lock kept.
	n.WaitLogN(regexp.MustCompile(`line=long-done`), starts, 30*time.Second)
	n.WaitLogN(regexp.MustCompile(`tick ran.*schedule=long.*outcome=success`), starts, 30*time.Second)
	if regexp.MustCompile(`schedule=long.*outcome=(lock_lost|failure)`).MatchString(n.Log()) {
		t.Fatalf("the running job was disturbed by the reload:\n%s", n.Log())
	}

	n.Signal(syscall.SIGTERM)
	if code := n.Wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
}
