package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Defaults for Command's zero-valued fields.
const (
	DefaultKillGrace      = 10 * time.Second
	DefaultMaxLineBytes   = 4096
	DefaultMaxOutputBytes = 1 << 20
)

// ErrInvalid marks a job that cannot run as declared (an empty argv, a bad
// environment variable name, a bad URL). Match it with errors.Is.
var ErrInvalid = errors.New("jobs: invalid job")

// Command runs an argv as a child process in its own process group. No
// shell is involved unless the operator writes one (["/bin/sh", "-c", ...]).
//
// The child's environment is this process's environment as BaseEnv lets it
// through, then Env, then the tick's variables (which win): BEXT_SCHEDULE_ID, BEXT_TICK_TIME (RFC 3339,
// the scheduled time), BEXT_NODE_ID and, when the tick runs under a lock,
// BEXT_LOCK_KEY and BEXT_FENCING_TOKEN; BEXT_RUN_ID, BEXT_ATTEMPT,
// BEXT_PREV_TICK_TIME and BEXT_LAST_SUCCESS_TICK_TIME (empty when none);
// TRACEPARENT when runs are traced. Inherited tick variables are
// dropped, so a node-local run never sees a stale lock key, nor a run a
// trace that is not its own.
//
// When ctx ends (timeout, lost lock, shutdown) the whole process group gets
// SIGTERM, and SIGKILL once KillGrace has passed if anything of it still
// runs. When the leader exits, whatever it left behind in its group is
// killed: nothing of a run outlives Run.
//
// Nor does it outlive this process, even one killed with -9 (a job must
// not run on after the lock it ran under is gone with its scheduler): in
// a program that calls Supervise first in main (bext-scheduler does), on
// Linux, the command runs under a small supervisor that kills it and every
// descendant, also one that left the group, when this process dies; see
// internal/supervise for what escapes. Elsewhere, or without Supervise,
// only the leader is killed then (a parent-death signal, Linux only).
//
// stdout and stderr are logged line by line, one record per line tagged with
// the schedule id, the tick and the stream, within per-line and per-run
// size limits. The pipes are always drained, so a chatty child never blocks.
type Command struct {
	Argv []string          // argv[0] is looked up in PATH when it has no slash
	Dir  string            // working directory; "" = this process's
	Env  map[string]string // extra environment variables
	// BaseEnv says which of this process's environment variables the
	// command starts with; the zero value passes them all.
	BaseEnv EnvPolicy
	// Logger receives the output records; nil means slog.Default().
	Logger *slog.Logger
	// Mask, when set, rewrites each output line before it is logged or
	// kept for the run's history (secrets the config expanded, URL
	// credentials); nil: lines as written.
	Mask func(string) string
	// KillGrace is how long the group has between SIGTERM and SIGKILL, and
	// how long Run waits for the output pipes once the group is gone (a
	// process that left the group may still hold them). Default 10s.
	KillGrace time.Duration
	// MaxLineBytes bounds one logged line; longer lines are cut and marked
	// truncated=true. Default 4096.
	MaxLineBytes int
	// MaxOutputBytes bounds the output logged per run (both streams
	// together); the rest is dropped after one "output truncated" record.
	// Default 1 MiB.
	MaxOutputBytes int64
}

// Environment variable names a command job receives (a contract).
const (
	EnvScheduleID   = "BEXT_SCHEDULE_ID"
	EnvTickTime     = "BEXT_TICK_TIME"
	EnvNodeID       = "BEXT_NODE_ID"
	EnvLockKey      = "BEXT_LOCK_KEY"
	EnvFencingToken = "BEXT_FENCING_TOKEN"
	EnvRunID        = "BEXT_RUN_ID"
	EnvAttempt      = "BEXT_ATTEMPT"
	EnvPrevTick     = "BEXT_PREV_TICK_TIME"
	EnvLastSuccess  = "BEXT_LAST_SUCCESS_TICK_TIME"
	// EnvTraceParent is the W3C trace context of the run's span, set
	// only when runs are traced (OpenTelemetry's standard name, which
	// its SDKs' environment carriers read).
	EnvTraceParent = "TRACEPARENT"
)

var tickVars = []string{EnvScheduleID, EnvTickTime, EnvNodeID, EnvLockKey, EnvFencingToken,
	EnvRunID, EnvAttempt, EnvPrevTick, EnvLastSuccess, EnvTraceParent}

// ExitError reports a command that did not exit with code 0, or that was
// stopped because its run's context ended.
type ExitError struct {
	Name   string         // argv[0]
	Code   int            // exit code; -1 when killed by a signal
	Signal syscall.Signal // the signal that killed it; 0 when it exited
	// Cause is why the run was cancelled (context.Cause of its context), nil
	// when the command ended by itself. Unwrap returns it, so
	// errors.Is(err, context.DeadlineExceeded) works.
	Cause error
}

// Error says how the command ended, naming only argv[0]: arguments may hold
// secrets.
func (e *ExitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "jobs: command %q ", e.Name)
	if e.Signal != 0 {
		fmt.Fprintf(&b, "killed by signal %s", signalName(e.Signal))
	} else {
		fmt.Fprintf(&b, "exited with code %d", e.Code)
	}
	if e.Cause != nil {
		fmt.Fprintf(&b, " after its run was cancelled: %v", e.Cause)
	}
	return b.String()
}

// ExitCode is the command's exit code, -1 when a signal killed it.
func (e *ExitError) ExitCode() int { return e.Code }

// Unwrap returns the cancellation cause, if any.
func (e *ExitError) Unwrap() error { return e.Cause }

// Run starts the command for tick t and waits until it and its process
// group are gone. It returns nil only for exit code 0 without cancellation.
func (c *Command) Run(ctx context.Context, t scheduler.Tick) error {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return fmt.Errorf("%w: command of schedule %q has an empty argv", ErrInvalid, t.ScheduleID)
	}
	name := c.Argv[0]
	env, err := c.environ(t)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("jobs: command %q not started: %w", name, context.Cause(ctx))
	}

	// Our own pipes rather than exec's copying goroutines: Run decides when
	// to stop reading, so a stray holder of the write end cannot block it.
	outR, outW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("jobs: command %q: creating stdout pipe: %w", name, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return fmt.Errorf("jobs: command %q: creating stderr pipe: %w", name, err)
	}
	cmd := exec.Command(name, c.Argv[1:]...)
	cmd.Dir = c.Dir
	cmd.Env = env
	cmd.Stdout = outW
	cmd.Stderr = errW
	// Its own group, under a supervisor when this program has one
	// (procattr_linux.go): nothing of it outlives this process.
	g, err := startGroup(cmd)
	// The child has its own copies; ours would keep the pipes open forever.
	closeAll(outW, errW)
	if err != nil {
		closeAll(outR, errR)
		return fmt.Errorf("jobs: starting command %q: %w", name, err)
	}
	defer g.release()

	out := newOutput(c.logger(), t, c.maxLineBytes(), c.maxOutputBytes(), c.Mask)
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		readBoth(out, outR, errR)
	}()
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		waitExited(g.pid)
	}()

	cancelled := c.supervise(ctx, g, exited, outDone)
	<-exited
	g.exited()
	waitErr := cmd.Wait()

	// Output still open now is held by a process that left the group; give
	// it the grace period, then stop reading.
	drain := time.NewTimer(c.killGrace())
	select {
	case <-outDone:
	case <-drain.C:
	}
	drain.Stop()
	closeAll(outR, errR)
	<-outDone

	return exitResult(ctx, name, waitErr, cancelled)
}

// supervise waits for the leader to exit by itself (false), or for ctx to
// end: then the group gets SIGTERM, and SIGKILL unless both the leader and
// every holder of the output pipes are gone within KillGrace (true).
func (c *Command) supervise(ctx context.Context, g *runGroup, exited, outDone <-chan struct{}) bool {
	select {
	case <-exited:
		return false
	case <-ctx.Done():
	}
	signalGroup(g.pgid, syscall.SIGTERM)
	grace := time.NewTimer(c.killGrace())
	defer grace.Stop()
	for exited != nil || outDone != nil {
		select {
		case <-exited:
			exited = nil
		case <-outDone:
			outDone = nil
		case <-grace.C:
			g.kill()
			return true
		}
	}
	return true
}

func exitResult(ctx context.Context, name string, waitErr error, cancelled bool) error {
	var cause error
	if cancelled {
		cause = context.Cause(ctx)
	}
	if waitErr == nil {
		if cause == nil {
			return nil
		}
		return &ExitError{Name: name, Code: 0, Cause: cause}
	}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		return fmt.Errorf("jobs: waiting for command %q: %w", name, waitErr)
	}
	e := &ExitError{Name: name, Code: ee.ExitCode(), Cause: cause}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.Signal = ws.Signal()
		e.Code = -1
	}
	return e
}

// environ builds the child's environment; see Command.
// EnvPolicy filters the scheduler's own environment before a command
// gets it. Its Env and the tick's BEXT_* variables are added after, always.
type EnvPolicy struct {
	// Clean starts the command from an empty environment plus Allow;
	// otherwise it inherits everything but Mask.
	Clean bool
	// Allow names variables that pass in either mode, Mask included.
	Allow []string
	// Mask names variables never passed unless allowed: the ones the
	// scheduler's config read through ${VAR} (backend URLs, tokens), which
	// exist for the scheduler, not for its jobs.
	Mask []string
}

// passes reports whether the inherited variable name reaches the command.
func (p EnvPolicy) passes(name string) bool {
	switch {
	case slices.Contains(p.Allow, name):
		return true
	case p.Clean:
		return false
	}
	return !slices.Contains(p.Mask, name)
}

// rfc3339 formats t, or "" for the zero time (a variable set but empty:
// "none", as the contract says).
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339)
}

func (c *Command) environ(t scheduler.Tick) ([]string, error) {
	base := os.Environ()
	env := make([]string, 0, len(base)+len(c.Env)+len(tickVars))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(tickVars, k) && c.BaseEnv.passes(k) {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		v := c.Env[k]
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("%w: schedule %q: environment variable name %q is empty or contains '=' or NUL", ErrInvalid, t.ScheduleID, k)
		}
		if strings.ContainsRune(v, 0) {
			// The value is not quoted: it may be a secret.
			return nil, fmt.Errorf("%w: schedule %q: environment variable %s contains a NUL byte", ErrInvalid, t.ScheduleID, k)
		}
		env = append(env, k+"="+v)
	}
	// Appended last: exec keeps the last value of a duplicated name.
	env = append(env,
		EnvScheduleID+"="+t.ScheduleID,
		EnvTickTime+"="+t.Time.Format(time.RFC3339),
		EnvNodeID+"="+t.NodeID,
		EnvRunID+"="+t.RunID,
		EnvAttempt+"="+strconv.Itoa(max(t.Attempt, 1)),
		EnvPrevTick+"="+rfc3339(t.PrevTime),
		EnvLastSuccess+"="+rfc3339(t.LastSuccessTime))
	if t.Locked() {
		env = append(env,
			EnvLockKey+"="+t.LockKey,
			EnvFencingToken+"="+strconv.FormatInt(t.FencingToken, 10))
	}
	if t.TraceParent != "" {
		env = append(env, EnvTraceParent+"="+t.TraceParent)
	}
	return env, nil
}

func (c *Command) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

func (c *Command) killGrace() time.Duration {
	if c.KillGrace > 0 {
		return c.KillGrace
	}
	return DefaultKillGrace
}

func (c *Command) maxLineBytes() int {
	if c.MaxLineBytes > 0 {
		return c.MaxLineBytes
	}
	return DefaultMaxLineBytes
}

func (c *Command) maxOutputBytes() int64 {
	if c.MaxOutputBytes > 0 {
		return c.MaxOutputBytes
	}
	return DefaultMaxOutputBytes
}

// signalGroup sends sig to process group pgid. ESRCH (the group is gone)
// is the expected outcome once a run has ended, so errors are ignored.
func signalGroup(pgid int, sig syscall.Signal) {
	_ = unix.Kill(-pgid, sig)
}

func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return strconv.Itoa(int(sig))
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close() // read ends closed twice or pipes already gone: nothing to report
	}
}
