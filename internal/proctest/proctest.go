// Package proctest runs the real bext-scheduler binary in tests: it builds
// it once, starts node processes, and lets a test wait on what a node
// prints instead of sleeping.
package proctest

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// TestHooksTag is the build tag that compiles the test-only hooks into the
// binary (the clock offset of internal/service). The shipped binary never
// has it; the e2e cluster tests build with it.
const TestHooksTag = "bexttest"

// Build compiles ./cmd/bext-scheduler into dir, with -race and the given
// build tags, and returns the binary's path. Without tags it is the binary
// operators run (the test hooks left out).
func Build(dir string, tags ...string) (string, error) { return build(dir, true, tags) }

// BuildTimed is Build without -race, for the end-to-end cluster tests
// whose every-second schedules measure timing: under the race runtime each
// command job's supervisor (a re-executed copy of the binary) takes up to
// a second to start on a loaded 2-core machine, so runs overlap the next
// tick and it is skipped. The packages themselves are race-tested by their
// own tests and by the CLI tests, which use Build.
func BuildTimed(dir string, tags ...string) (string, error) { return build(dir, false, tags) }

func build(dir string, race bool, tags []string) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bext-scheduler")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "./cmd/bext-scheduler")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building bext-scheduler: %v\n%s", err, out)
	}
	return bin, nil
}

// Result is how a finished command ended.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// DefaultParallel sets -test.parallel to n unless the command line set
// it: for packages whose tests mostly wait on processes and wall-clock
// ticks, not on the CPU. Call it first in TestMain.
func DefaultParallel(n int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}

// Main is a TestMain for packages that test the built binary: it builds
// it into a temporary directory, sets *bin, runs the tests, and fails the
// run if goroutines leaked. timed, when given, is set to BuildTimed's
// binary (with the test hooks, as e2e's, so the two share the build
// cache), in a directory of its own: for tests whose clusters time
// every-second schedules, where a -race node costs the CPU that other
// tests running beside them need.
func Main(m *testing.M, bin *string, timed ...*string) {
	dir, err := os.MkdirTemp("", "bext-bin-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin, err = Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i, p := range timed {
		sub := filepath.Join(dir, "timed"+strconv.Itoa(i))
		if err = os.Mkdir(sub, 0o755); err == nil {
			*p, err = BuildTimed(sub, TestHooksTag)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Run runs the binary to completion with a deadline, in the test's
// environment plus env.
func Run(t testing.TB, bin string, env []string, args ...string) Result {
	t.Helper()
	return run(t, bin, append(os.Environ(), env...), args)
}

// RunClean is Run with only PATH, HOME and env in the environment, so a
// variable the developer's shell happens to set cannot make a config pass.
func RunClean(t testing.TB, bin string, env []string, args ...string) Result {
	t.Helper()
	return run(t, bin, append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...), args)
}

func run(t testing.TB, bin string, env, args []string) Result {
	t.Helper()
	// What the binary does depends on code and servers go test's cache
	// cannot see.
	testenv.Uncached()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running %s %v: %v", bin, args, err)
		}
		code = ee.ExitCode()
	}
	return Result{Code: code, Stdout: out.String(), Stderr: errb.String()}
}

// Node is a running bext-scheduler process whose stderr (the log) is read
// line by line, so tests wait for log lines rather than for time.
type Node struct {
	t    testing.TB
	Cmd  *exec.Cmd
	mu   sync.Mutex
	cond *sync.Cond
	log  []string
	eof  bool
	done chan struct{}
	err  error // Wait's result, valid after done
}

// Start starts the binary with args; the process is killed in t.Cleanup if
// the test has not stopped it.
func Start(t testing.TB, bin string, env []string, args ...string) *Node {
	t.Helper()
	// What the binary does depends on code and servers go test's cache
	// cannot see.
	testenv.Uncached()
	cmd := exec.Command(bin, args...)
	// A -race binary sleeps a second at exit (GORACE atexit_sleep_ms), and
	// every command job runs under a re-executed copy of the binary (its
	// supervisor): without this, each job of a -race node lasts a second
	// more than it should, and an every-second schedule overlaps itself.
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	n := &Node{t: t, Cmd: cmd, done: make(chan struct{})}
	n.cond = sync.NewCond(&n.mu)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			n.mu.Lock()
			n.log = append(n.log, sc.Text())
			n.cond.Broadcast()
			n.mu.Unlock()
		}
		n.err = cmd.Wait()
		n.mu.Lock()
		n.eof = true
		n.cond.Broadcast()
		n.mu.Unlock()
		close(n.done)
	}()
	t.Cleanup(func() {
		select {
		case <-n.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-n.done
		}
		if t.Failed() {
			t.Logf("log of pid %d:\n%s", cmd.Process.Pid, n.Log())
		}
	})
	return n
}

// Log returns everything the node has logged so far.
func (n *Node) Log() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return strings.Join(n.log, "\n")
}

// WaitLog waits until a log line matches re, returning its submatches. It
// fails the test if the process exits first or timeout passes.
func (n *Node) WaitLog(re *regexp.Regexp, timeout time.Duration) []string {
	n.t.Helper()
	return n.WaitLogN(re, 1, timeout)
}

// WaitLogN waits until count log lines match re and returns the last one's
// submatches.
func (n *Node) WaitLogN(re *regexp.Regexp, count int, timeout time.Duration) []string {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() { // wakes the waiter below
		n.mu.Lock()
		n.cond.Broadcast()
		n.mu.Unlock()
	})
	defer timer.Stop()
	n.mu.Lock()
	defer n.mu.Unlock()
	for {
		var last []string
		seen := 0
		for _, l := range n.log {
			if m := re.FindStringSubmatch(l); m != nil {
				seen++
				last = m
			}
		}
		if seen >= count {
			return last
		}
		if n.eof {
			n.t.Fatalf("process exited before logging %d lines matching %q; log:\n%s", count, re, strings.Join(n.log, "\n"))
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("no %d log lines matching %q within %v; log:\n%s", count, re, timeout, strings.Join(n.log, "\n"))
		}
		n.cond.Wait()
	}
}

// Signal sends sig to the node process.
func (n *Node) Signal(sig syscall.Signal) {
	n.t.Helper()
	if err := n.Cmd.Process.Signal(sig); err != nil {
		n.t.Fatalf("signal %v: %v", sig, err)
	}
}

// Wait waits up to timeout for the process to exit and returns its exit code.
func (n *Node) Wait(timeout time.Duration) int {
	n.t.Helper()
	select {
	case <-n.done:
	case <-time.After(timeout):
		n.t.Fatalf("process did not exit within %v; log:\n%s", timeout, n.Log())
	}
	if n.err == nil {
		return 0
	}
	if ee, ok := n.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	n.t.Fatalf("waiting for process: %v", n.err)
	return -1
}

// GroupAlive reports whether any live (non-zombie) process is in process
// group pgid. kill(-pgid, 0) is not enough: where PID 1 does not reap
// orphans (some containers and sandboxes), killed children linger as
// zombies and still count as group members to kill(2).
func GroupAlive(pgid int) (bool, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid && f[0] != "Z" {
			return true, nil
		}
	}
	return false, nil
}

// Alive reports whether process pid exists and is not a zombie.
func Alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// WaitGone polls /proc until none of pids is alive, failing the test
// with the survivors after timeout (and killing them, so they do not
// outlive the test). There is nothing to be told about the death of a
// process that is not one's child, so this polls, bounded.
func WaitGone(t testing.TB, pids []int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var alive []int
		for _, p := range pids {
			if Alive(p) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range alive {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("processes %v still run %v later", alive, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ReadPids waits until file exists (written with a rename, so whole) and
// returns the pids it lists, separated by white space.
func ReadPids(t testing.TB, file string, timeout time.Duration) []int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(file); err == nil {
			var pids []int
			for _, f := range strings.Fields(string(b)) {
				p, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("%s: %q is not a pid", file, f)
				}
				pids = append(pids, p)
			}
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written within %v", file, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ForkingScript is a shell script for a command that forks: it writes its
// own pid, a background child's and a child's that left the process group
// (setsid) to the file $PIDFILE (renamed into place), then becomes a
// sleep itself (exec: the listed pids are the whole tree). Every one
// of them must die with whatever supervises the command.
const ForkingScript = `sleep 300 & a=$!; setsid sleep 300 & b=$!; echo "$$ $a $b" > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE"; exec sleep 300`
