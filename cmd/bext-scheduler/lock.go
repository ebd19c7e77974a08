package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/internal/service"
	"github.com/bext-dev/bext-scheduler/internal/supervise"
	"github.com/bext-dev/bext-scheduler/locking"
)

// killGrace is how long a command gets between SIGTERM and SIGKILL when its
// lock is lost.
const killGrace = 10 * time.Second

func newLockCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "lock",
		Short: "Take the cluster-wide locks from scripts",
	}
	c.AddCommand(newLockRunCmd())
	return c
}

func newLockRunCmd() *cobra.Command {
	var (
		path string
		key  string
		ttl  time.Duration
		wait time.Duration
	)
	c := &cobra.Command{
		Use:   "run --key K --ttl D [--wait D] -- CMD [ARGS...]",
		Short: "Run a command while holding a cluster-wide lock (flock(1) for the cluster)",
		Long: `lock run takes lock K through the configured backend, runs CMD with
BEXT_LOCK_KEY and BEXT_FENCING_TOKEN in its environment, renews the lock
about every TTL/3 while CMD runs, and releases it when CMD exits. The
scheduler's locks and these are the same: --key nightly-report excludes the
schedule with that id.

Exit codes: CMD's own (128+N when signal N killed it); 127 when CMD cannot
be started (not found); 75 when the lock is held elsewhere (after --wait, if given); 69 when the backend is
unreachable; 2 for usage or config errors, or a permission the backend
refuses to the configured user; 1 when the lock was lost while
CMD ran (CMD got SIGTERM, then SIGKILL 10s later); 128+N when signal N
(130 SIGINT, 143 SIGTERM) ended --wait before the lock was taken.

Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on to CMD's process
group; the lock is released after CMD exits.

CMD never outlives lock run (Linux). It runs in a process group of its own
under a small supervisor (this binary re-executed) that, if lock run dies
in any way, kill -9 included, SIGKILLs CMD and every process it started:
also those that left its group (setsid, daemons that double-fork), since
orphans are re-parented to the supervisor, not to PID 1. What still
escapes: processes handed to something outside that tree (systemd-run, at,
a container engine, a remote host over ssh), and CMD's descendants if the
supervisor itself, not lock run, is SIGKILLed. When CMD exits, what it left
running is killed: nothing runs on without the lock.

From a terminal (stdin is the terminal and lock run is in its foreground),
CMD's group is made the terminal's foreground group, so CMD can read it
and gets ^C and ^\ directly; the terminal is handed back when CMD ends.
^Z stops CMD but not lock run, which keeps the lock: resume CMD with
kill -CONT from another terminal, or end it with kill.

Example crontab line (one node of many runs the backup each night):
  0 3 * * * bext-scheduler lock run --config /etc/bext/bext.config.toml --key backup --ttl 2h -- /usr/local/bin/backup`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 0 {
				return usageErrorf("put the command after --: lock run --key K --ttl D -- CMD ARGS")
			}
			if err := locking.CheckKey(key); err != nil {
				return withCode(exitUsage, fmt.Errorf("--key: %w", err))
			}
			if ttl < time.Second {
				return usageErrorf("--ttl must be at least 1s, got %v", ttl)
			}
			if wait < 0 {
				return usageErrorf("--wait must not be negative, got %v", wait)
			}
			cfg, err := loadConfig(c.ErrOrStderr(), configPath(path))
			if err != nil {
				return err
			}
			return lockRun(c.Context(), cfg, key, ttl, wait, args, c.ErrOrStderr())
		},
	}
	addConfigFlag(c, &path)
	c.Flags().StringVar(&key, "key", "", "lock key (a schedule id locks that schedule)")
	c.Flags().DurationVar(&ttl, "ttl", 0, "lock lease; renewed about every ttl/3 while the command runs")
	c.Flags().DurationVar(&wait, "wait", 0, "keep trying this long while the lock is held elsewhere")
	_ = c.MarkFlagRequired("key")
	_ = c.MarkFlagRequired("ttl")
	return c
}

// openDistributed opens the configured backend for a CLI command that
// needs locks shared with other processes.
func openDistributed(ctx context.Context, cfg *config.Config, what string, logger *slog.Logger) (service.Backend, error) {
	switch cfg.Locking.Backend {
	case "":
		return service.Backend{}, usageErrorf("%s needs a lock backend: set [locking] backend in %s", what, cfg.Path)
	case "memory":
		return service.Backend{}, usageErrorf("%s needs a shared backend (redis or pg): the memory backend locks one process only", what)
	}
	b, err := service.OpenBackend(ctx, cfg, logger)
	if err != nil {
		return service.Backend{}, withCode(exitUsage, err)
	}
	return b, nil
}

func lockRun(parent context.Context, cfg *config.Config, key string, ttl, wait time.Duration, argv []string, stderr io.Writer) error {
	if parent == nil {
		parent = context.Background()
	}
	logger := newLogger(stderr, cfg.Log).With("key", key)
	b, err := openDistributed(parent, cfg, "lock run", logger)
	if err != nil {
		return err
	}
	defer closeLocker(b.Locker, logger)

	// Signals that arrive while waiting for the lock end the wait; once the
	// command runs they are passed on to it instead.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	h, err := acquire(parent, b.Locker, key, ttl, wait, sigs, logger)
	if err != nil {
		return err
	}
	code, lost := runHolding(parent, b.Locker, h, argv, sigs, logger)

	rctx, cancel := context.WithTimeout(context.WithoutCancel(parent), 10*time.Second)
	defer cancel()
	if err := b.Locker.Release(rctx, h); err != nil && lost == nil {
		logger.Warn("releasing the lock", "err", err)
	}
	if lost != nil {
		return withCode(exitFailure, fmt.Errorf("lock %q lost while the command ran (%v); the command was stopped", key, lost))
	}
	return withCode(code, nil)
}

// acquire tries once, or with --wait keeps trying with jittered backoff.
func acquire(ctx context.Context, l locking.Locker, key string, ttl, wait time.Duration, sigs <-chan os.Signal, logger *slog.Logger) (*locking.Handle, error) {
	deadline := time.Now().Add(wait)
	const firstBackoff = 100 * time.Millisecond
	backoff := firstBackoff
	for {
		h, err := l.TryLock(ctx, key, ttl)
		switch {
		case errors.Is(err, locking.ErrPermission):
			return nil, backendErr(fmt.Sprintf("taking lock %q", key), err)
		case err != nil:
			return nil, withCode(exitUnavailable, fmt.Errorf("lock backend unavailable: %w", err))
		case h != nil:
			return h, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, withCode(exitHeld, fmt.Errorf("lock %q is held elsewhere", key))
		}
		if backoff == firstBackoff {
			logger.Info("lock held elsewhere: waiting", "wait", wait)
		}
		d := min(backoff/2+rand.N(backoff/2+1), left)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case s := <-sigs:
			// Interrupted, not "held elsewhere" (75): a caller that
			// retries on 75 must not retry what the operator stopped.
			t.Stop()
			return nil, withCode(128+int(s.(syscall.Signal)), fmt.Errorf("lock %q still held elsewhere when %v arrived; gave up waiting", key, s))
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// forwarded are the signals lock run passes on to CMD's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// runHolding runs argv under a supervisor (internal/supervise), in a
// process group of its own, while renewing h. It returns the command's
// exit code, and a non-nil error when the lock was lost (the command is
// then terminated).
func runHolding(ctx context.Context, l locking.Locker, h *locking.Handle, argv []string, sigs <-chan os.Signal, logger *slog.Logger) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "BEXT_LOCK_KEY="+h.Key(), "BEXT_FENCING_TOKEN="+strconv.FormatInt(h.Fence(), 10))
	// From a terminal, CMD's group must be the terminal's foreground:
	// a background group that reads it is stopped (SIGTTIN), and lock run
	// would renew the lock for a command that never ends.
	fg := supervise.StdinIsForegroundTTY()
	proc, err := supervise.Start(cmd, supervise.Options{Foreground: fg})
	if err != nil {
		logger.Error("starting the command", "argv0", argv[0], "err", err)
		return 127, nil
	}
	defer proc.Kill()
	pgid := proc.Pgid
	if fg {
		// We are in the background now: a log line must not stop us
		// (TOSTOP), and the terminal goes back to our group at the end
		// if the supervisor could not give it back itself.
		signal.Ignore(syscall.SIGTTOU)
		defer supervise.RestoreTTY(pgid)
	}
	exited := make(chan error, 1)
	go func() { exited <- proc.Cmd.Wait() }()

	renew := time.NewTicker(max(h.TTL()/3, 10*time.Millisecond))
	defer renew.Stop()
	var lost error
	var kill <-chan time.Time
	for {
		select {
		case err := <-exited:
			if err == nil {
				return 0, lost
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal()), lost
				}
				return ee.ExitCode(), lost
			}
			return 1, lost
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-renew.C:
			if lost != nil {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, max(h.TTL()/3, time.Second))
			err := l.Renew(rctx, h)
			cancel()
			if err != nil {
				lost = err
				logger.Error("lock lost; terminating the command", "err", err)
				_ = syscall.Kill(-pgid, syscall.SIGTERM)
				kill = time.After(killGrace)
			}
		case <-kill:
			proc.Kill() // SIGKILL for CMD and all it started
		}
	}
}

// backendErr is a failed call to the backend, for the commands that talk
// to it: a permission the backend refused to the configured user is a
// configuration problem (exit 2, as an invalid config: retrying will not
// help), anything else the backend not answering (69). what names the
// operation when err does not.
func backendErr(what string, err error) error {
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	if errors.Is(err, locking.ErrPermission) {
		return withCode(exitUsage, fmt.Errorf("permission denied (the backend refuses it to the user of the configured URL: grant it, or configure one that has it; docs/OPERATING.md, \"Backend permissions\"): %w", err))
	}
	return withCode(exitUnavailable, err)
}

// lister is what `locks` needs of a backend.
type lister interface {
	List(ctx context.Context) ([]locking.LockInfo, error)
}

func newLocksCmd() *cobra.Command {
	var (
		path   string
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "locks",
		Short: "List the locks held now under the configured prefix or namespace",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := loadConfig(c.ErrOrStderr(), configPath(path))
			if err != nil {
				return err
			}
			logger := newLogger(c.ErrOrStderr(), cfg.Log)
			b, err := openDistributed(c.Context(), cfg, "locks", logger)
			if err != nil {
				return err
			}
			defer closeLocker(b.Locker, logger)
			ls, ok := b.Locker.(lister)
			if !ok {
				return withCode(exitFailure, fmt.Errorf("the %s backend cannot list its locks", b.Name))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			infos, err := ls.List(ctx)
			if err != nil {
				return backendErr("listing locks", err)
			}
			return printLocks(c.OutOrStdout(), infos, asJSON)
		},
	}
	addConfigFlag(c, &path)
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return c
}

func printLocks(w io.Writer, infos []locking.LockInfo, asJSON bool) error {
	if asJSON {
		type row struct {
			Key       string `json:"key"`
			Fence     int64  `json:"fence"`
			TTLLeftMS *int64 `json:"ttl_left_ms,omitempty"`
			Holder    string `json:"holder,omitempty"`
		}
		out := make([]row, 0, len(infos))
		for _, i := range infos {
			r := row{Key: i.Key, Fence: i.Fence, Holder: i.Holder}
			if i.TTLLeft > 0 {
				ms := i.TTLLeft.Milliseconds()
				r.TTLLeftMS = &ms
			}
			out = append(out, r)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tFENCE\tTTL LEFT\tHOLDER")
	for _, i := range infos {
		left := "-"
		if i.TTLLeft > 0 {
			left = i.TTLLeft.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", safe(i.Key), i.Fence, left, dash(i.Holder))
	}
	return tw.Flush()
}
