package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
	"github.com/bext-dev/bext-scheduler/internal/proctest"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// lockBackend writes a config for one backend and says how to break it.
type lockBackend struct {
	name string
	// setup returns a config path whose backend the test owns, and a
	// function that makes the backend unreachable.
	setup func(t *testing.T) (cfg string, kill func())
}

var lockBackends = []lockBackend{
	{"redis", func(t *testing.T) (string, func()) {
		r := testenv.StartRedis(t)
		cfg := writeFile(t, t.TempDir(), "bext.config.toml", fmt.Sprintf(`
[locking]
backend = "redis"
[locking.redis]
url = %q
key_prefix = "%s:"
op_timeout = "500ms"
`, r.URL(), testenv.UniqueName(t)))
		return cfg, r.Stop
	}},
	{"pg", func(t *testing.T) (string, func()) {
		// Through a proxy, so "the backend dies" cuts every session
		// without stopping the Postgres other tests share. op_timeout
		// leaves a loaded machine time to connect (1s once timed out a
		// first connection at load average 7); a cut is still noticed
		// by the lease, which ends with the 1s TTL whatever it is.
		direct, ns := testenv.PGURL(t), testenv.UniqueName(t)
		t.Cleanup(func() { dropFences(t, direct, ns) })
		u := direct
		p := faultproxy.Start(t, "127.0.0.1:5432")
		u = strings.Replace(u, "127.0.0.1:5432", p.Addr(), 1)
		cfg := writeFile(t, t.TempDir(), "bext.config.toml", fmt.Sprintf(`
[locking]
backend = "pg"
[locking.pg]
url = %q
namespace = %q
max_sessions = 4
op_timeout = "3s"
`, u, ns))
		return cfg, p.Cut
	}},
}

var holdingRE = regexp.MustCompile(`holding fence=(\d+)`)

// holdCmd holds the lock until the file release exists, saying so on stderr.
func holdCmd(release string) []string {
	return []string{"/bin/sh", "-c", `echo "holding fence=$BEXT_FENCING_TOKEN key=$BEXT_LOCK_KEY" >&2; while [ ! -e ` + release + ` ]; do sleep 0.05; done`}
}

func TestLockRun(t *testing.T) {
	t.Parallel()
	for _, b := range lockBackends {
		t.Run(b.name, func(t *testing.T) {
			cfg, _ := b.setup(t)
			dir := t.TempDir()
			release := filepath.Join(dir, "release")
			key := "nightly-report"

			// One holds the lock...
			first := proctest.Start(t, bin, nil, append([]string{"lock", "run", "--config", cfg, "--key", key, "--ttl", "3s", "--"}, holdCmd(release)...)...)
			fence := first.WaitLog(holdingRE, 30*time.Second)[1]

			// ...so a second exits 75 at once.
			r := proctest.Run(t, bin, nil, "lock", "run", "--config", cfg, "--key", key, "--ttl", "3s", "--", "/bin/echo", "must not run")
			if r.Code != exitHeld {
				t.Fatalf("second lock run: exit %d, want %d\n%s%s", r.Code, exitHeld, r.Stdout, r.Stderr)
			}
			if strings.Contains(r.Stdout, "must not run") || !strings.Contains(r.Stderr, "held elsewhere") {
				t.Fatalf("second lock run ran its command or did not say why:\nstdout %q\nstderr %q", r.Stdout, r.Stderr)
			}

			// locks lists the held lock, with its fence.
			r = proctest.Run(t, bin, nil, "locks", "--config", cfg, "--json")
			if r.Code != 0 {
				t.Fatalf("locks: exit %d\n%s", r.Code, r.Stderr)
			}
			var held []struct {
				Key    string `json:"key"`
				Fence  int64  `json:"fence"`
				Holder string `json:"holder"`
			}
			if err := json.Unmarshal([]byte(r.Stdout), &held); err != nil {
				t.Fatalf("locks --json: %v\n%s", err, r.Stdout)
			}
			if len(held) != 1 || held[0].Key != key || fmt.Sprint(held[0].Fence) != fence {
				t.Fatalf("locks = %+v, want only %q with fence %s", held, key, fence)
			}

			// A waiter gets the lock once the first finishes.
			waiter := proctest.Start(t, bin, nil, "lock", "run", "--config", cfg, "--key", key, "--ttl", "3s", "--wait", "30s",
				"--", "/bin/sh", "-c", `echo "waiter got fence=$BEXT_FENCING_TOKEN" >&2`)
			if err := os.WriteFile(release, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if code := first.Wait(30 * time.Second); code != 0 {
				t.Fatalf("first lock run: exit %d, want 0", code)
			}
			got := waiter.WaitLog(regexp.MustCompile(`waiter got fence=(\d+)`), 30*time.Second)[1]
			if code := waiter.Wait(30 * time.Second); code != 0 {
				t.Fatalf("waiting lock run: exit %d, want 0", code)
			}
			if atoi(t, got) <= atoi(t, fence) {
				t.Errorf("waiter's fence %s not above the first holder's %s", got, fence)
			}

			// Released: locks no longer lists it.
			r = proctest.Run(t, bin, nil, "locks", "--config", cfg, "--json")
			if r.Code != 0 || strings.Contains(r.Stdout, key) {
				t.Fatalf("locks after release: exit %d, output %s", r.Code, r.Stdout)
			}

			// The command's own exit code passes through.
			r = proctest.Run(t, bin, nil, "lock", "run", "--config", cfg, "--key", key, "--ttl", "3s", "--", "/bin/sh", "-c", "exit 7")
			if r.Code != 7 {
				t.Fatalf("exit %d, want the command's 7\n%s", r.Code, r.Stderr)
			}
		})
	}
}

func TestLockRunBackendDiesMidRun(t *testing.T) {
	t.Parallel()
	for _, b := range lockBackends {
		t.Run(b.name, func(t *testing.T) {
			cfg, kill := b.setup(t)
			n := proctest.Start(t, bin, nil, "lock", "run", "--config", cfg, "--key", "k", "--ttl", "1s",
				"--", "/bin/sh", "-c", `echo "holding fence=$BEXT_FENCING_TOKEN pgid=$$" >&2; sleep 60 & wait`)
			n.WaitLog(holdingRE, 30*time.Second)
			kill()
			code := n.Wait(30 * time.Second)
			if code == 0 {
				t.Fatal("lock run exited 0 after its backend died mid-run")
			}
			if !strings.Contains(n.Log(), "lost") {
				t.Fatalf("no message about the lost lock:\n%s", n.Log())
			}
			pg := atoi(t, regexp.MustCompile(`pgid=(\d+)`).FindStringSubmatch(n.Log())[1])
			if alive, _ := proctest.GroupAlive(pg); alive {
				t.Fatalf("the command's process group %d outlived the lost lock", pg)
			}
		})
	}
}

func TestLockRunBackendUnreachable(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, t.TempDir(), "bext.config.toml", fmt.Sprintf(`
[locking]
backend = "redis"
[locking.redis]
url = "redis://127.0.0.1:%d/0"
op_timeout = "300ms"
`, testenv.FreePort(t)))
	r := proctest.Run(t, bin, nil, "lock", "run", "--config", cfg, "--key", "k", "--ttl", "2s", "--", "/bin/echo", "must not run")
	if r.Code != exitUnavailable || strings.Contains(r.Stdout, "must not run") {
		t.Fatalf("exit %d, want %d without running\n%s%s", r.Code, exitUnavailable, r.Stdout, r.Stderr)
	}
}

func TestLockRunForwardsSIGTERM(t *testing.T) {
	t.Parallel()
	cfg, _ := lockBackends[0].setup(t)
	n := proctest.Start(t, bin, nil, "lock", "run", "--config", cfg, "--key", "k", "--ttl", "3s",
		"--", "/bin/sh", "-c", `trap 'echo got-term >&2; exit 3' TERM; echo "holding fence=$BEXT_FENCING_TOKEN" >&2; while true; do sleep 0.05; done`)
	n.WaitLog(holdingRE, 30*time.Second)
	n.Signal(syscall.SIGTERM)
	n.WaitLog(regexp.MustCompile(`got-term`), 30*time.Second)
	if code := n.Wait(30 * time.Second); code != 3 {
		t.Fatalf("exit %d, want the command's 3", code)
	}
	// Released after the command exited: the key is free at once.
	r := proctest.Run(t, bin, nil, "lock", "run", "--config", cfg, "--key", "k", "--ttl", "3s", "--", "/bin/true")
	if r.Code != 0 {
		t.Fatalf("lock still held after the forwarded SIGTERM: exit %d\n%s", r.Code, r.Stderr)
	}
}

func TestLockUsageErrors(t *testing.T) {
	t.Parallel()
	cfgMem := writeFile(t, t.TempDir(), "mem.toml", "[locking]\nbackend = \"memory\"\n")
	cfgNone := writeFile(t, t.TempDir(), "none.toml", "node_id = \"a\"\n")
	for _, args := range [][]string{
		{"lock", "run", "--config", cfgNone, "--key", "k", "--ttl", "1s", "--", "true"},  // no backend
		{"lock", "run", "--config", cfgMem, "--key", "k", "--ttl", "1s", "--", "true"},   // memory: one process only
		{"lock", "run", "--config", cfgNone, "--ttl", "1s", "--", "true"},                // no --key
		{"lock", "run", "--config", cfgNone, "--key", "k", "--", "true"},                 // no --ttl
		{"lock", "run", "--config", cfgNone, "--key", "k", "--ttl", "1s"},                // no command
		{"lock", "run", "--config", cfgNone, "--key", "", "--ttl", "1s", "--", "true"},   // empty key
		{"lock", "run", "--config", cfgNone, "--key", "k", "--ttl", "-5s", "--", "true"}, // bad ttl
		{"locks", "--config", cfgMem},
	} {
		r := proctest.Run(t, bin, nil, args...)
		if r.Code != exitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", args, r.Code, exitUsage, r.Stderr)
		}
		noCrash(t, r)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// dropFences removes the fencing rows a test's namespace left in Postgres.
func dropFences(t *testing.T, url, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Logf("cleaning fence rows: %v", err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DELETE FROM bext_lock_fences WHERE namespace = $1`, ns); err != nil {
		t.Logf("cleaning fence rows: %v", err)
	}
}
