package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/service"
	"github.com/bext-dev/bext-scheduler/locking"
)

// The operators' commands (DESIGN.md "Operating it"): status, history,
// trigger, pause, resume, backfill. They read and write the cluster state
// in the configured Redis or Postgres backend directly; with the memory
// backend, whose state lives in the node's process, they ask the node's
// API at [http] listen.

const opsBackendHelp = `It reads and writes the cluster state in the configured backend (Redis or
Postgres) directly, with only the config file. With backend = "memory" the
state lives inside the node's process, so it asks the node's API at
[http] listen instead (writes send [http] token; reads [http] read_token
when set).`

const opsExitHelp = `Exit codes: 0 ok; 1 runtime failure; 2 usage, invalid config, unknown
schedule id, or a permission the backend refused to the configured user;
69 backend (or node API) unreachable.`

// opsTimeout bounds one read or write of the cluster state.
const opsTimeout = 30 * time.Second

// opsFlags are the flags every operators' command has.
type opsFlags struct {
	path   string
	asJSON bool
}

func (f *opsFlags) add(c *cobra.Command) {
	addConfigFlag(c, &f.path)
	c.Flags().BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
}

// operator loads the config and opens what answers for the cluster. id,
// when not "", must name a schedule of the config (exit 2 otherwise).
func (f *opsFlags) operator(c *cobra.Command, id string) (*config.Config, ops.Operator, func(), error) {
	cfg, err := loadConfig(c.ErrOrStderr(), configPath(f.path))
	if err != nil {
		return nil, nil, nil, err
	}
	if id != "" && !hasSchedule(cfg, id) {
		return nil, nil, nil, usageErrorf("unknown schedule %q: no [[scheduled]] table of %s has that id", id, cfg.Path)
	}
	logger := newLogger(c.ErrOrStderr(), cfg.Log)
	op, closer, err := openOperator(c.Context(), cfg, logger)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, op, closer, nil
}

func hasSchedule(cfg *config.Config, id string) bool {
	for _, s := range cfg.Scheduled {
		if s.ID == id {
			return true
		}
	}
	return false
}

// openOperator opens the backend's cluster state, or a client of the
// node's API for the memory backend.
func openOperator(ctx context.Context, cfg *config.Config, logger *slog.Logger) (ops.Operator, func(), error) {
	switch cfg.Locking.Backend {
	case config.BackendNone:
		return nil, nil, usageErrorf("no lock backend is configured in %s: the cluster state (history, pauses, triggers) lives in the backend; set [locking] backend", cfg.Path)
	case config.BackendMemory:
		if !cfg.HTTP.Enabled() {
			return nil, nil, usageErrorf("with backend = \"memory\" the cluster state lives in the node's process and this command asks the node's API, but [http] listen is off in %s", cfg.Path)
		}
		cl, err := ops.NewClient(cfg.HTTP.Listen, cfg.HTTP.Token, cfg.HTTP.ReadToken)
		if err != nil {
			return nil, nil, withCode(exitUsage, err)
		}
		cl.SetBy(whoAmI())
		return cl, func() {}, nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	// Quiet at open: what the backend's client logs (go-redis's dial
	// failures) is the nodes' business; a command reports its own error.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := service.OpenBackend(ctx, cfg, quiet)
	if err != nil {
		return nil, nil, withCode(exitUsage, err)
	}
	closer := func() { closeLocker(b.Locker, logger) }
	store, ok := b.Locker.(ops.Store)
	if !ok {
		closer()
		return nil, nil, withCode(exitFailure, fmt.Errorf("the %s backend keeps no cluster state in this build", b.Name))
	}
	return ops.New(store, service.Schedules(cfg, logger, nil), ops.Options{By: whoAmI(), MaxClockSkew: cfg.Locking.MaxClockSkew.Duration, Keep: cfg.History.Keep}), closer, nil
}

// whoAmI is user@host, recorded with the requests this CLI queues.
func whoAmI() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// opsErr maps an ops error to the exit code the contract names.
func opsErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ops.ErrUnknownSchedule), errors.Is(err, ops.ErrInvalid), errors.Is(err, ops.ErrNoBackend):
		return withCode(exitUsage, err)
	case errors.Is(err, ops.ErrRunning):
		return withCode(exitHeld, err)
	case errors.Is(err, locking.ErrPermission):
		return backendErr("", err)
	case ops.Unreachable(err):
		return withCode(exitUnavailable, err)
	}
	return withCode(exitFailure, err)
}

func newStatusCmd() *cobra.Command {
	var f opsFlags
	c := &cobra.Command{
		Use:   "status",
		Short: "Every schedule (paused?, next tick, last run), the live nodes and config drift",
		Long: `status shows, for the whole cluster: every schedule of the config with its
hint, pause flag, next tick and last run (tick, node, result, duration); the
live nodes; and config drift (live nodes running different schedules, with
the schedule ids that differ and the nodes on each side).

` + opsBackendHelp + `

` + opsExitHelp,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			_, op, closer, err := f.operator(c, "")
			if err != nil {
				return err
			}
			defer closer()
			ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
			defer cancel()
			st, err := op.Status(ctx)
			if err != nil {
				return opsErr(err)
			}
			if f.asJSON {
				return printJSON(c.OutOrStdout(), st)
			}
			return printStatus(c.OutOrStdout(), st)
		},
	}
	f.add(c)
	return c
}

func newHistoryCmd() *cobra.Command {
	var (
		f opsFlags
		n int
	)
	c := &cobra.Command{
		Use:   "history ID [-n N]",
		Short: "A schedule's last N runs, cluster-wide, newest first",
		Long: `history shows the schedule's last N runs on every node, newest first: tick,
node, result, start, duration, attempts, fence, whether it was manual, run
id and error. The backend keeps the newest [history] keep runs (default 100).

` + opsBackendHelp + `

` + opsExitHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if n < 1 || n > ops.MaxRunsLimit {
				return usageErrorf("-n must be 1 to %d, got %d", ops.MaxRunsLimit, n)
			}
			_, op, closer, err := f.operator(c, args[0])
			if err != nil {
				return err
			}
			defer closer()
			ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
			defer cancel()
			runs, err := op.Runs(ctx, args[0], n)
			if err != nil {
				return opsErr(err)
			}
			if f.asJSON {
				return printJSON(c.OutOrStdout(), runs)
			}
			return printRuns(c.OutOrStdout(), runs)
		},
	}
	f.add(c)
	c.Flags().IntVarP(&n, "n", "n", 20, "how many runs")
	return c
}

func newTriggerCmd() *cobra.Command {
	var (
		f    opsFlags
		wait time.Duration
	)
	c := &cobra.Command{
		Use:   "trigger ID",
		Short: "Run a schedule once now, on one node, under its lock",
		Long: `trigger asks the cluster to run the schedule once now: the first node to take
the schedule's lock runs it (exactly one node), recorded with manual = true,
without moving the tick mark (the next regular tick still runs). It works
on a paused schedule too.

trigger waits up to --wait (default 30s) for a node to accept the request
and says which did. If none did in time, the request stays queued and
runs when a node takes it; trigger then exits 1.

` + opsBackendHelp + `

Exit codes: 0 once a node accepted it; 75 when the schedule is running
elsewhere and its overlap is skip (nothing is queued); 1 when no node
accepted it within --wait; 2 usage, invalid config or unknown schedule id;
69 backend (or node API) unreachable.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if wait <= 0 {
				return usageErrorf("--wait must be more than 0, got %v", wait)
			}
			id := args[0]
			_, op, closer, err := f.operator(c, id)
			if err != nil {
				return err
			}
			defer closer()
			ctx, cancel := context.WithTimeout(context.Background(), wait+opsTimeout)
			defer cancel()
			ans, err := op.Trigger(ctx, id, wait)
			if err != nil {
				return opsErr(err)
			}
			if f.asJSON {
				if err := printJSON(c.OutOrStdout(), ans); err != nil {
					return err
				}
			} else if ans.Accepted {
				fmt.Fprintf(c.OutOrStdout(), "trigger %s: accepted by node %s\n", safe(id), safe(ans.Node))
			}
			if !ans.Accepted {
				return withCode(exitFailure, fmt.Errorf("trigger %s: queued, but no node accepted it within %v; it stays queued and runs when a node takes the schedule's lock (are nodes running? see 'bext-scheduler status')", id, wait))
			}
			return nil
		},
	}
	f.add(c)
	c.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for a node to accept the request")
	return c
}

func newPauseCmd() *cobra.Command {
	var (
		f           opsFlags
		note, until string
	)
	c := &cobra.Command{
		Use:   "pause ID [--note TEXT] [--until T]",
		Short: "Stop a schedule's ticks on every node",
		Long: `pause stops the schedule's ticks on every node from its next tick (they are
skipped with reason "paused" and not replayed on resume). The flag lives in
the backend: it survives restarts. --note says why (shown by status);
--until ends the pause by itself at T (RFC 3339, or a duration from now
such as 2h). A trigger still runs a paused schedule.

` + opsBackendHelp + `

` + opsExitHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			req := ops.PauseRequest{Note: note}
			if until != "" {
				t, err := parseWhen(until, time.Now())
				if err != nil {
					return usageErrorf("--until: %v", err)
				}
				req.Until = &t
			}
			id := args[0]
			_, op, closer, err := f.operator(c, id)
			if err != nil {
				return err
			}
			defer closer()
			ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
			defer cancel()
			ans, err := op.Pause(ctx, id, req)
			if err != nil {
				return opsErr(err)
			}
			if f.asJSON {
				return printJSON(c.OutOrStdout(), ans)
			}
			msg := fmt.Sprintf("paused %s on every node from its next tick", id)
			if ans.Until != nil {
				msg += " until " + fmtTime(*ans.Until)
			}
			if ans.Note != "" {
				msg += fmt.Sprintf(" (note: %s)", ans.Note)
			}
			fmt.Fprintln(c.OutOrStdout(), safe(msg))
			return nil
		},
	}
	f.add(c)
	c.Flags().StringVar(&note, "note", "", "why (shown by status and the API)")
	c.Flags().StringVar(&until, "until", "", "end the pause by itself at T (RFC 3339, or a duration from now: 2h)")
	return c
}

func newResumeCmd() *cobra.Command {
	var f opsFlags
	c := &cobra.Command{
		Use:   "resume ID",
		Short: "Restart a paused schedule's ticks on every node",
		Long: `resume lifts the schedule's pause on every node: its next tick runs. Ticks
skipped while it was paused are not replayed (use backfill for that).

` + opsBackendHelp + `

` + opsExitHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			id := args[0]
			_, op, closer, err := f.operator(c, id)
			if err != nil {
				return err
			}
			defer closer()
			ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
			defer cancel()
			ans, err := op.Resume(ctx, id)
			if err != nil {
				return opsErr(err)
			}
			if f.asJSON {
				return printJSON(c.OutOrStdout(), ans)
			}
			fmt.Fprintf(c.OutOrStdout(), "resumed %s: its next tick runs; ticks skipped while paused are not replayed\n", safe(id))
			return nil
		},
	}
	f.add(c)
	return c
}

func newBackfillCmd() *cobra.Command {
	var (
		f        opsFlags
		from, to string
	)
	c := &cobra.Command{
		Use:   "backfill ID --from T1 --to T2",
		Short: "Run each tick of a past range once, in order",
		Long: fmt.Sprintf(`backfill queues every tick of the schedule from T1 to T2 (both included,
RFC 3339) as the scheduler would have fired them: nodes run them one at a
time cluster-wide, in order, each with its own BEXT_TICK_TIME, under the
schedule's lock, without moving the tick mark (regular ticks go first).
More than %d ticks are refused; so is a second backfill of a schedule while
one is queued, and a range holding a tick past the schedule's tick mark or
now (exit 2, naming the latest tick a backfill may run): later ticks are
still its regular ticks' to run.

`+opsBackendHelp+`

`+opsExitHelp, ops.MaxBackfillTicks),
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			t1, err := time.Parse(time.RFC3339, from)
			if err != nil {
				return usageErrorf("--from %q: want an RFC 3339 time such as 2026-01-10T00:00:00Z", from)
			}
			t2, err := time.Parse(time.RFC3339, to)
			if err != nil {
				return usageErrorf("--to %q: want an RFC 3339 time such as 2026-01-11T00:00:00Z", to)
			}
			id := args[0]
			_, op, closer, err := f.operator(c, id)
			if err != nil {
				return err
			}
			defer closer()
			ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
			defer cancel()
			ans, err := op.Backfill(ctx, id, t1, t2)
			if err != nil {
				return opsErr(err)
			}
			if f.asJSON {
				return printJSON(c.OutOrStdout(), ans)
			}
			fmt.Fprintf(c.OutOrStdout(), "queued %d ticks of %s, %s to %s; nodes run them one at a time, in order (see 'bext-scheduler history %s')\n",
				len(ans.Ticks), safe(id), fmtTime(ans.Ticks[0]), fmtTime(ans.Ticks[len(ans.Ticks)-1]), safe(id))
			return nil
		},
	}
	f.add(c)
	c.Flags().StringVar(&from, "from", "", "first time of the range (RFC 3339)")
	c.Flags().StringVar(&to, "to", "", "last time of the range (RFC 3339)")
	_ = c.MarkFlagRequired("from")
	_ = c.MarkFlagRequired("to")
	return c
}

// parseWhen reads an RFC 3339 time, or a duration from now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(d), nil
	}
	return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-01-10T06:00:00Z) or a duration from now (2h)", s)
}
