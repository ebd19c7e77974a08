// Command bext-scheduler is a distributed cron scheduler with built-in
// locking: every node reads one TOML file, fires ticks from cron
// expressions, and takes a cluster-wide lock (Redis or Postgres) before
// running a require_global job, so each tick runs once, on one node.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/bext-dev/bext-scheduler/internal/supervise"
)

// Exit codes (a contract: DESIGN.md "CLI and exit codes").
const (
	exitOK          = 0
	exitFailure     = 1  // runtime failure
	exitUsage       = 2  // unknown command or flag, missing argument, invalid config
	exitUnavailable = 69 // lock run: the backend is unreachable (EX_UNAVAILABLE)
	exitHeld        = 75 // lock run: the lock is held elsewhere (EX_TEMPFAIL)
)

// Set by the linker (see Makefile).
var (
	version = "dev"
	commit  = "unknown"
)

// exitError carries the process exit code with an error; code-only errors
// (err == nil) exit quietly, for when the message was printed already.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error { return &exitError{code: code, err: err} }

func usageErrorf(format string, a ...any) error {
	return withCode(exitUsage, fmt.Errorf(format, a...))
}

func main() {
	// First: in a process started as a command's supervisor this runs the
	// supervisor and exits (internal/supervise).
	supervise.Main()
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs the CLI and maps errors to exit codes. Errors that did not
// come from our commands (cobra's: unknown command or flag, bad arguments)
// are usage errors.
func execute(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			// Errors may quote the backend's text or a config's bytes.
			fmt.Fprintln(stderr, "bext-scheduler:", safeLines(ee.err.Error()))
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "bext-scheduler:", safeLines(err.Error()))
	fmt.Fprintln(stderr, "Run 'bext-scheduler --help' for usage.")
	return exitUsage
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "bext-scheduler",
		Short: "Distributed cron with built-in locking",
		Long: `bext-scheduler runs cron jobs on several nodes at once. Every node reads the
same TOML file; a schedule's hint decides whether a tick needs the
cluster-wide lock (require_global, prefer_global) or runs on every node
(node_local). Locks live in Redis or Postgres, or in process memory for a
single node.

Start with:
  bext-scheduler validate --config bext.config.toml   # check the file
  bext-scheduler next --config bext.config.toml       # what runs when, and how it locks
  bext-scheduler run --config bext.config.toml        # the service
  bext-scheduler status --config bext.config.toml     # the cluster: schedules, runs, nodes, drift

--config defaults to $BEXT_CONFIG, then ./bext.config.toml.
Exit codes: 0 ok, 1 runtime failure, 2 usage error or invalid config;
lock run: the command's own code, 75 lock held elsewhere, 69 backend unreachable;
trigger: 75 when the schedule runs elsewhere (overlap = "skip");
status, history, trigger, pause, resume, backfill: 69 backend unreachable.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return withCode(exitUsage, fmt.Errorf("%w (see '%s --help')", err, c.CommandPath()))
	})
	root.AddCommand(newStopCmd(), newCancelCmd())
	root.AddCommand(newRunCmd(), newValidateCmd(), newNextCmd(), newLockCmd(), newLocksCmd(),
		newStatusCmd(), newHistoryCmd(), newTriggerCmd(), newPauseCmd(), newResumeCmd(), newBackfillCmd(), newAuditCmd(),
		newVersionCmd(), newManCmd())
	return root
}

// configPath is --config, else $BEXT_CONFIG, else bext.config.toml.
func configPath(flag string) string {
	if flag != "" {
		return flag
	}
	if env := os.Getenv("BEXT_CONFIG"); env != "" {
		return env
	}
	return "bext.config.toml"
}

func addConfigFlag(c *cobra.Command, p *string) {
	c.Flags().StringVarP(p, "config", "c", "", "config file (default $BEXT_CONFIG, then bext.config.toml)")
	_ = c.MarkFlagFilename("config", "toml")
}
