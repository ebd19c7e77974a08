package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bext-dev/bext-scheduler/internal/ops"
)

func newStopCmd() *cobra.Command {
	var (
		f    opsFlags
		wait time.Duration
	)
	c := &cobra.Command{
		Use:   "stop ID",
		Short: "Stop the runs of a schedule going on now, on whichever node runs them",
		Long: `stop asks the nodes that run the schedule now to stop those runs: each one
cancels its run's job (a command gets SIGTERM, then SIGKILL after its kill
grace), records it with result cancelled, and starts no retry of it. Only
the runs the nodes announced when stop asked are stopped, never one that
starts after; pause the schedule too to keep it from running again. It works whichever node or
backend the CLI talks to: the nodes poll for stop requests once a second
while they run something. What runs is what the nodes announced (at most a
second old), as status shows it.

` + opsBackendHelp + `

Exit codes: 0 once every node that ran it stopped its run; 1 when nothing
of the schedule was running, or no node acted within --wait; 2 usage,
invalid config or unknown schedule id; 69 backend (or node API)
unreachable.`,
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
			ans, err := op.Stop(ctx, id, wait)
			if err != nil {
				return opsErr(err)
			}
			if f.asJSON {
				return printJSON(c.OutOrStdout(), ans)
			}
			for _, s := range ans.Stopped {
				fmt.Fprintf(c.OutOrStdout(), "stop %s: node %s stopped run %s (tick %s)\n",
					safe(id), safe(s.Node), safe(s.RunID), s.Tick.UTC().Format(time.RFC3339))
			}
			return nil
		},
	}
	f.add(c)
	c.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for the running nodes to act")
	return c
}

func newCancelCmd() *cobra.Command {
	var f opsFlags
	c := &cobra.Command{
		Use:   "cancel ID",
		Short: "Drop the triggers and backfill ticks queued for a schedule",
		Long: `cancel drops every manual run still queued for the schedule: triggers no node
took yet (a trigger asked while every node was down would otherwise run
whenever a node next starts) and the backfill ticks not run yet. A run a
node already took is not queued any more: stop stops it.

` + opsBackendHelp + `

Exit codes: 0 (also when nothing was queued: the answer says how many were
dropped); 2 usage, invalid config or unknown schedule id; 69 backend (or
node API) unreachable.`,
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
			ans, err := op.Cancel(ctx, id)
			if err != nil {
				return opsErr(err)
			}
			if f.asJSON {
				return printJSON(c.OutOrStdout(), ans)
			}
			fmt.Fprintf(c.OutOrStdout(), "cancel %s: %d queued request(s) dropped\n", safe(id), ans.Cancelled)
			return nil
		},
	}
	f.add(c)
	return c
}

// printLive prints what status knows beyond the table: the runs going on
// now, the manual runs queued, and who last acted on each schedule.
func printLive(w io.Writer, st ops.Status, now time.Time) error {
	var running, queued, acted bool
	for _, s := range st.Schedules {
		running = running || len(s.Running) > 0
		queued = queued || len(s.Queued) > 0
		acted = acted || s.LastAction != nil
	}
	if running {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUNNING\tNODE\tTICK\tFOR\tATTEMPT\tRUN ID")
		for _, s := range st.Schedules {
			for _, r := range s.Running {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", safe(s.ID), safe(r.Node), fmtTime(r.Tick),
					fmtDuration(max(now.Sub(r.StartedAt), 0)), r.Attempt, safe(r.RunID))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if queued {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "QUEUED\tKIND\tTICK\tBY\tQUEUED AT")
		for _, s := range st.Schedules {
			for _, q := range s.Queued {
				tick := fmtTime(q.Tick)
				if q.From != nil && q.To != nil {
					tick = fmtTime(*q.From) + " .. " + fmtTime(*q.To)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", safe(s.ID), q.Kind, tick, safe(dash(q.By)), fmtTime(q.QueuedAt))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if acted {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LAST ACTION\tKIND\tBY\tAT\tNOTE")
		for _, s := range st.Schedules {
			if a := s.LastAction; a != nil {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", safe(s.ID), safe(a.Kind), safe(dash(a.By)), fmtTime(a.At), safe(oneLine(a.Note, 60)))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// fmtOffset shows a node's clock offset, "-" when it has none measured.
func fmtOffset(sec *float64) string {
	if sec == nil {
		return "-"
	}
	return fmt.Sprintf("%+.3fs", *sec)
}
