package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

var (
	tickAt = time.Date(2026, 11, 30, 3, 0, 0, 0, time.FixedZone("CET", 3600))
	locked = scheduler.Tick{ScheduleID: "nightly", Time: tickAt, NodeID: "node-a", LockKey: "nightly", FencingToken: 42}
	local  = scheduler.Tick{ScheduleID: "local", Time: tickAt, NodeID: "node-b"}
)

// sh builds a command job running script under /bin/sh: the operator
// writing a shell, as the contract allows.
func sh(rec *recorder, script string, args ...string) *Command {
	return &Command{
		Argv:   append([]string{"/bin/sh", "-c", script, "sh"}, args...),
		Logger: slog.New(rec),
	}
}

func TestCommandEnvironment(t *testing.T) {
	// Inherited tick variables must not leak into a run: a node-local tick
	// would otherwise see someone else's lock.
	t.Setenv(EnvLockKey, "stale-key")
	t.Setenv(EnvFencingToken, "7")
	t.Setenv("BEXT_TEST_INHERITED", "kept")
	const script = `echo "id=$BEXT_SCHEDULE_ID"; echo "time=$BEXT_TICK_TIME"; echo "node=$BEXT_NODE_ID"
echo "key=$BEXT_LOCK_KEY"; echo "fence=$BEXT_FENCING_TOKEN"; echo "extra=$EXTRA"; echo "inherited=$BEXT_TEST_INHERITED"`

	tests := []struct {
		name string
		tick scheduler.Tick
		want []string
	}{
		{"locked", locked, []string{"id=nightly", "time=2026-11-30T03:00:00+01:00", "node=node-a",
			"key=nightly", "fence=42", "extra=x y", "inherited=kept"}},
		{"node local", local, []string{"id=local", "time=2026-11-30T03:00:00+01:00", "node=node-b",
			"key=", "fence=", "extra=x y", "inherited=kept"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			c := sh(rec, script)
			// The operator's Env cannot override the tick's own variables.
			c.Env = map[string]string{"EXTRA": "x y", EnvScheduleID: "spoofed"}
			if err := c.Run(context.Background(), tt.tick); err != nil {
				t.Fatalf("Run: %v", err)
			}
			got := rec.lines("stdout")
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("child saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestCommandOutputTagged(t *testing.T) {
	rec := newRecorder()
	err := sh(rec, `echo one; echo two; echo oops >&2; printf 'crlf\r\n'; printf 'no newline'`).Run(context.Background(), locked)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got, want := strings.Join(rec.lines("stdout"), "|"), "one|two|crlf|no newline"; got != want {
		t.Errorf("stdout lines = %q, want %q", got, want)
	}
	if got := rec.lines("stderr"); len(got) != 1 || got[0] != "oops" {
		t.Errorf("stderr lines = %q, want [oops]", got)
	}
	for _, r := range rec.all() {
		if r.Attrs["schedule"] != "nightly" || r.Attrs["tick"] != tickAt.String() {
			t.Errorf("record %q not tagged with schedule and tick: %v", r.Msg, r.Attrs)
		}
	}
}

func TestCommandExitCode(t *testing.T) {
	err := sh(newRecorder(), `exit 3`).Run(context.Background(), local)
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("Run = %v, want an *ExitError", err)
	}
	if ee.ExitCode() != 3 || ee.Signal != 0 || ee.Cause != nil {
		t.Errorf("ExitError = %+v, want code 3, no signal, no cause", ee)
	}
	if !strings.Contains(err.Error(), "exited with code 3") {
		t.Errorf("error %q does not give the exit code", err)
	}
}

func TestCommandKilledBySignal(t *testing.T) {
	err := sh(newRecorder(), `kill -KILL $$`).Run(context.Background(), local)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Signal != syscall.SIGKILL || ee.ExitCode() != -1 {
		t.Fatalf("Run = %#v, want an *ExitError for SIGKILL", err)
	}
	if !strings.Contains(err.Error(), "SIGKILL") {
		t.Errorf("error %q does not say which signal", err)
	}
}

func TestCommandStartFailure(t *testing.T) {
	const missing = "/nonexistent/bext-no-such-binary"
	err := (&Command{Argv: []string{missing, "--secret=hunter2"}}).Run(context.Background(), local)
	if err == nil {
		t.Fatal("Run of a missing binary succeeded")
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		t.Errorf("a start failure is not an exit: %v", err)
	}
	if !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "starting") {
		t.Errorf("error %q does not name argv[0] as failing to start", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %q leaks an argument", err)
	}
}

func TestCommandInvalid(t *testing.T) {
	tests := []struct {
		name string
		c    *Command
		want string
	}{
		{"empty argv", &Command{}, "empty argv"},
		{"bad env name", &Command{Argv: []string{"/bin/true"}, Env: map[string]string{"A=B": "x"}}, `"A=B"`},
		{"NUL in env value", &Command{Argv: []string{"/bin/true"}, Env: map[string]string{"TOKEN": "se\x00cret"}}, "TOKEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Run(context.Background(), local)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run = %v, want ErrInvalid mentioning %s", err, tt.want)
			}
			if strings.Contains(fmt.Sprint(err), "cret") {
				t.Errorf("error %q leaks the env value", err)
			}
		})
	}
}

func TestCommandNotStartedWhenCancelled(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := sh(newRecorder(), `touch "$1/ran"`, dir).Run(ctx, local)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if _, statErr := os.Stat(filepath.Join(dir, "ran")); statErr == nil {
		t.Error("the command ran although its context was already cancelled")
	}
}

func TestCommandLongLineTruncated(t *testing.T) {
	rec := newRecorder()
	c := sh(rec, `printf '%0100d\n' 0; echo next; printf 'héhé\n'`)
	c.MaxLineBytes = 10
	if err := c.Run(context.Background(), local); err != nil {
		t.Fatalf("Run: %v", err)
	}
	var got []string
	for _, r := range rec.all() {
		got = append(got, r.Attrs["line"]+"/"+r.Attrs["truncated"])
	}
	// "héhé" is 6 bytes: no cut. The 100-digit line is cut at 10 bytes.
	want := []string{"0000000000/true", "next/", "héhé/"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("records = %q, want %q", got, want)
	}

	rec = newRecorder()
	c = sh(rec, `printf 'aaaaaaaaaé\n'`) // the cut at 10 bytes splits é
	c.MaxLineBytes = 10
	if err := c.Run(context.Background(), local); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := rec.lines("stdout"); len(got) != 1 || got[0] != "aaaaaaaaa" {
		t.Errorf("lines = %q, want the partial rune dropped", got)
	}
}

func TestCommandOutputCap(t *testing.T) {
	rec := newRecorder()
	// 2 MB of output: far beyond the cap and beyond a pipe's buffer, so the
	// child blocks forever unless the rest is still drained.
	c := sh(rec, `i=0; while [ $i -lt 20 ]; do echo 123456789; i=$((i+1)); done; head -c 2000000 /dev/zero; echo`)
	c.MaxOutputBytes = 100 // ten 10-byte lines
	if err := c.Run(context.Background(), local); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := rec.lines("stdout"); len(got) != 10 {
		t.Errorf("logged %d lines, want 10 within the 100-byte cap", len(got))
	}
	var cut int
	for _, r := range rec.all() {
		if r.Msg == "output truncated" {
			cut++
			if r.Attrs["schedule"] != "local" || r.Attrs["limit_bytes"] != "100" {
				t.Errorf("truncation record attrs = %v", r.Attrs)
			}
		}
	}
	if cut != 1 {
		t.Errorf("%d \"output truncated\" records, want exactly 1", cut)
	}
}

func TestCommandCancelTerminatesGroup(t *testing.T) {
	dir := t.TempDir()
	rec := newRecorder()
	ready := rec.seen("ready")
	// The leader traps TERM and records it; its child sleep is in the same
	// group and must be gone afterwards too.
	c := sh(rec, `trap 'echo term > "$1/term"; exit 0' TERM
echo $$ > "$1/pgid"; sleep 1000 & echo ready; wait`, dir)
	c.KillGrace = 5 * time.Second // TERM must be enough: no SIGKILL needed

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, local) }()
	<-ready
	cancel()
	err := <-done

	var ee *ExitError
	if !errors.As(err, &ee) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want an *ExitError caused by context.Canceled", err)
	}
	if ee.Signal != 0 || ee.Code != 0 {
		t.Errorf("ExitError = %+v, want the trap's exit 0", ee)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "term")); err != nil || strings.TrimSpace(string(b)) != "term" {
		t.Errorf("the leader's TERM trap did not run: %v", err)
	}
	if live := liveGroupMembers(t, readInt(t, filepath.Join(dir, "pgid"))); len(live) != 0 {
		t.Errorf("processes of the run survived: %v", live)
	}
}

func TestCommandKillAfterGrace(t *testing.T) {
	dir := t.TempDir()
	rec := newRecorder()
	ready := rec.seen("ready")
	// The whole group ignores TERM (an ignored signal stays ignored across
	// exec, so the sleep does too).
	c := sh(rec, `trap '' TERM; echo $$ > "$1/pgid"; sleep 1000 & echo ready; wait`, dir)
	c.KillGrace = 200 * time.Millisecond

	lost := errors.New("lock lost")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, locked) }()
	<-ready
	start := time.Now()
	cancel(lost)
	err := <-done
	elapsed := time.Since(start)

	var ee *ExitError
	if !errors.As(err, &ee) || ee.Signal != syscall.SIGKILL {
		t.Fatalf("Run = %v, want an *ExitError for SIGKILL", err)
	}
	if !errors.Is(err, lost) || !strings.Contains(err.Error(), "lock lost") {
		t.Errorf("error %q does not carry the cancellation cause", err)
	}
	if elapsed < c.KillGrace {
		t.Errorf("SIGKILL came after %v, before the %v grace", elapsed, c.KillGrace)
	}
	if live := liveGroupMembers(t, readInt(t, filepath.Join(dir, "pgid"))); len(live) != 0 {
		t.Errorf("processes of the run survived: %v", live)
	}
}

func TestCommandStrayChildrenKilled(t *testing.T) {
	dir := t.TempDir()
	// The leader exits at once, leaving a child in its group that holds the
	// output pipes: Run must neither wait for it nor leave it running.
	c := sh(newRecorder(), `echo $$ > "$1/pgid"; sleep 1000 & echo started`, dir)
	c.KillGrace = 5 * time.Second
	start := time.Now()
	if err := c.Run(context.Background(), local); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(start); d >= c.KillGrace {
		t.Errorf("Run took %v: it waited for the stray child's pipes", d)
	}
	if live := liveGroupMembers(t, readInt(t, filepath.Join(dir, "pgid"))); len(live) != 0 {
		t.Errorf("processes of the run survived: %v", live)
	}
}

func TestCommandEscapedProcessDoesNotBlock(t *testing.T) {
	dir := t.TempDir()
	// setsid moves the sleep out of the group, so no group kill reaches it;
	// it still holds stdout. Run gives up on the pipes after KillGrace.
	c := sh(newRecorder(), `setsid sleep 1000 & echo $! > "$1/escaped"; echo done`, dir)
	c.KillGrace = 200 * time.Millisecond
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(dir, "escaped")); err == nil {
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 0 {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
	})
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background(), local) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run is blocked on a pipe held by a process outside its group")
	}
}

// The run identity of the contract reaches the command, and its output's
// tail reaches Tick.Output for the run's history.
func TestCommandRunIdentityAndOutputTail(t *testing.T) {
	t.Setenv(EnvRunID, "inherited-stale")
	rec := newRecorder()
	var tail strings.Builder
	tk := locked
	tk.RunID, tk.Attempt = "0123abcd", 2
	tk.PrevTime = tk.Time.Add(-24 * time.Hour)
	tk.Output = &tail
	c := sh(rec, `echo "run=$BEXT_RUN_ID attempt=$BEXT_ATTEMPT prev=$BEXT_PREV_TICK_TIME last=[$BEXT_LAST_SUCCESS_TICK_TIME]"; echo err >&2`)
	if err := c.Run(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	want := "run=0123abcd attempt=2 prev=2026-11-29T03:00:00+01:00 last=[]"
	if got := rec.lines("stdout"); len(got) != 1 || got[0] != want {
		t.Errorf("child saw %q, want %q", got, want)
	}
	if got := tail.String(); !strings.Contains(got, want+"\n") || !strings.Contains(got, "err\n") {
		t.Errorf("output tail %q lacks the run's lines", got)
	}
}
