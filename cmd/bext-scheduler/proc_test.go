package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// `kill -9` of lock run left CMD, and what it forked,
// running re-parented to PID 1 while a second lock run took the lock.
func TestLockRunKilledTakesItsCommandAlong(t *testing.T) {
	t.Parallel()
	for _, b := range lockBackends {
		t.Run(b.name, func(t *testing.T) {
			cfg, _ := b.setup(t)
			pidfile := filepath.Join(t.TempDir(), "pids")
			n := proctest.Start(t, bin, []string{"PIDFILE=" + pidfile}, "lock", "run", "--config", cfg, "--key", "backup", "--ttl", "2s",
				"--", "/bin/sh", "-c", proctest.ForkingScript)
			pids := proctest.ReadPids(t, pidfile, 30*time.Second)
			n.Signal(syscall.SIGKILL)
			// Survivors hold lock run's stderr: wait for them first (and
			// kill them on failure), or Wait would wait for them too.
			proctest.WaitGone(t, pids, 10*time.Second)
			n.Wait(30 * time.Second)

			// The lock is free again (Postgres at once; Redis after the TTL).
			r := proctest.Run(t, bin, nil, "lock", "run", "--config", cfg, "--key", "backup", "--ttl", "2s", "--wait", "20s", "--", "/bin/true")
			if r.Code != 0 {
				t.Fatalf("second lock run: exit %d, want 0\n%s", r.Code, r.Stderr)
			}
		})
	}
}

// The same for a scheduled command job when its `run` node is SIGKILLed.
func TestRunKilledTakesItsJobsAlong(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "pids")
	cfg := writeFile(t, dir, "bext.config.toml", fmt.Sprintf(`
node_id = "k9"
[http]
listen = "off"
[locking]
backend = "memory"
[[scheduled]]
id = "forker"
cron = "*/1 * * * * *"
hint = "node_local"
command = ["/bin/sh", "-c", %q]
env = { PIDFILE = %q }
`, proctest.ForkingScript, pidfile))
	n := proctest.Start(t, bin, nil, "run", "--config", cfg)
	pids := proctest.ReadPids(t, pidfile, 30*time.Second)
	n.Signal(syscall.SIGKILL)
	proctest.WaitGone(t, pids, 10*time.Second)
	n.Wait(30 * time.Second)
}

// from a terminal, CMD was put in a background group of
// it, so reading stdin stopped it (SIGTTIN) and lock run renewed forever.
// A real pty: lock run is a session leader with the pty as its
// controlling terminal, in the foreground, as under an interactive shell.
func TestLockRunFromTerminal(t *testing.T) {
	t.Parallel()
	cfg, _ := lockBackends[0].setup(t)
	master, slave := openPTY(t)

	cmd := exec.Command(bin, "lock", "run", "--config", cfg, "--key", "tty", "--ttl", "3s",
		"--", "/bin/sh", "-c", `read x; echo "got $x"`)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var (
		mu  sync.Mutex
		out bytes.Buffer
	)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			mu.Lock()
			out.Write(b[:n])
			mu.Unlock()
			if err != nil { // EIO once no process has the pty open
				return
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // a session of its own
		master.Close()
		<-readDone
	}()

	if _, err := master.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("lock run: %v\n%s", err, out.String())
		}
		// The pty's output is complete once every holder is gone. Waited
		// for before taking mu: the reader takes mu for each read.
		select {
		case <-readDone:
		case <-time.After(20 * time.Second):
			t.Fatal("the pty still has a holder 20s after lock run exited")
		}
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(out.String(), "got hello") {
			t.Fatalf("the command did not read the terminal:\n%s", out.String())
		}
	case <-time.After(20 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("lock run still runs 20s after its command was given its input (stopped reading the terminal?); states %s\n%s", states(cmd.Process.Pid), out.String())
	}
}

// openPTY opens a pseudo-terminal pair with /dev/ptmx.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("opening /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("opening the pty's slave: %v", err)
	}
	return m, s
}

// states lists "pid:state" of session sid's processes, for a failure message.
func states(sid int) string {
	var b strings.Builder
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 3 && f[3] == fmt.Sprint(sid) {
			fmt.Fprintf(&b, "%s:%s ", e.Name(), f[0])
		}
	}
	return b.String()
}

// a signal while --wait waits is an interruption
// (128+N), not "held elsewhere" (75), which a caller may retry.
func TestLockRunWaitInterrupted(t *testing.T) {
	t.Parallel()
	cfg, _ := lockBackends[0].setup(t)
	release := filepath.Join(t.TempDir(), "release")
	holder := proctest.Start(t, bin, nil, append([]string{"lock", "run", "--config", cfg, "--key", "k", "--ttl", "3s", "--"}, holdCmd(release)...)...)
	// Before the holder's own cleanup: its command would hold its stderr.
	t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o644) })
	holder.WaitLog(holdingRE, 30*time.Second)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		w := proctest.Start(t, bin, nil, "lock", "run", "--config", cfg, "--key", "k", "--ttl", "3s", "--wait", "60s", "--", "/bin/echo", "must not run")
		w.WaitLog(regexp.MustCompile(`lock held elsewhere: waiting`), 30*time.Second)
		w.Signal(sig)
		if code := w.Wait(30 * time.Second); code != 128+int(sig) {
			t.Errorf("%v while waiting: exit %d, want %d\n%s", sig, code, 128+int(sig), w.Log())
		}
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	holder.Wait(30 * time.Second)
}

// a second SIGTERM during the shutdown grace ends it:
// the running job is cancelled, its lock released, the node exits.
func TestRunSecondSignalEndsGrace(t *testing.T) {
	t.Parallel()
	cfgLock, _ := lockBackends[0].setup(t)
	lockCfg, err := os.ReadFile(cfgLock)
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, t.TempDir(), "run.toml", `
node_id = "twice"
shutdown_grace = "120s"
[http]
listen = "off"
`+string(lockCfg)+`
[[scheduled]]
id = "slow"
cron = "*/1 * * * * *"
hint = "require_global"
expected_runtime = "5m"
command = ["/bin/sh", "-c", "echo slow-start; sleep 300 & wait"]
`)
	n := proctest.Start(t, bin, nil, "run", "--config", cfg)
	n.WaitLog(regexp.MustCompile(`line=slow-start`), 30*time.Second)
	n.Signal(syscall.SIGTERM)
	n.WaitLog(regexp.MustCompile(`shutting down.*in_flight=1`), 30*time.Second)
	start := time.Now()
	n.Signal(syscall.SIGTERM)
	if code := n.Wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, n.Log())
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("exited %v after the second signal: the 120s grace was not cut short", d)
	}
	if !strings.Contains(n.Log(), "second signal") {
		t.Errorf("the log does not say the grace was cut short:\n%s", n.Log())
	}
	// The job's lock was released: it is free at once.
	r := proctest.Run(t, bin, nil, "lock", "run", "--config", cfg, "--key", "slow", "--ttl", "2s", "--", "/bin/true")
	if r.Code != 0 {
		t.Fatalf("the job's lock is still held after the node exited: exit %d\n%s", r.Code, r.Stderr)
	}
}

// SIGHUP and SIGQUIT reach the command too.
func TestLockRunForwardsHUPAndQUIT(t *testing.T) {
	t.Parallel()
	cfg, _ := lockBackends[0].setup(t)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT} {
		n := proctest.Start(t, bin, nil, "lock", "run", "--config", cfg, "--key", "k", "--ttl", "3s",
			"--", "/bin/sh", "-c", `trap 'echo got-sig >&2; exit 3' HUP QUIT; echo "holding fence=$BEXT_FENCING_TOKEN" >&2; while true; do sleep 0.05; done`)
		n.WaitLog(holdingRE, 30*time.Second)
		n.Signal(sig)
		n.WaitLog(regexp.MustCompile(`got-sig`), 30*time.Second)
		if code := n.Wait(30 * time.Second); code != 3 {
			t.Fatalf("%v: exit %d, want the command's 3", sig, code)
		}
	}
}
