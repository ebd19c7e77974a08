package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bext-dev/bext-scheduler/internal/ops"
)

func newAuditCmd() *cobra.Command {
	var (
		f        opsFlags
		from, to string
	)
	c := &cobra.Command{
		Use:   "audit [ID] [--from T1] [--to T2]",
		Short: "Every tick of a schedule accounted for: ran, skipped, lost, pending or unknown",
		Long: fmt.Sprintf(`audit ID lists every tick the schedule's cron produced after T1 up to T2
with its fate, from its run history, its skip records and its tick mark:

  ran      a run of the tick is recorded (node, run id, fence, lateness,
           duration, result; result running: the run's node has not
           recorded its end, maybe died)
  skipped  consumed without a run: paused (with the pause's note), missed
           (decided past its catch-up window), overlap (the previous run
           held the lock), stopped (no node asked before the mark passed
           it), not_run (granted, ran nowhere)
  lost     the tick mark passed it, yet neither a run nor a skip is
           recorded: see docs/OPERATING.md "Auditing ticks"
  pending  not yet due, not yet decided, or decided under %v ago
  unknown  before the history kept, or a node_local schedule's tick
           nothing recorded

Manual runs (trigger) in the range are listed too. Without --from: the
schedule's last %d ticks up to --to (default now); at most %d ticks.

Without ID: one line per schedule counting its fates over the range
(default the last 24h), the schedules with lost ticks first.

T1 and T2 are RFC 3339 times, or durations meaning that long ago (2h).

`+opsBackendHelp+`

Exit codes: 0 no tick lost; 1 a tick lost (or a runtime failure); 2 usage,
invalid config, a bad time or an unknown schedule id; 69 backend (or node
API) unreachable.`, ops.AuditGrace, ops.AuditDefaultTicks, ops.MaxAuditTicks),
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			now := time.Now()
			var t1, t2 time.Time
			var err error
			if from != "" {
				if t1, err = parseAgo(from, now); err != nil {
					return usageErrorf("--from: %v", err)
				}
			}
			if to != "" {
				if t2, err = parseAgo(to, now); err != nil {
					return usageErrorf("--to: %v", err)
				}
			}
			if !t1.IsZero() && !t2.IsZero() && !t1.Before(t2) {
				return usageErrorf("--from %s is not before --to %s", fmtTime(t1), fmtTime(t2))
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			_, op, closer, err := f.operator(c, id)
			if err != nil {
				return err
			}
			defer closer()
			ctx, cancel := context.WithTimeout(context.Background(), opsTimeout)
			defer cancel()
			out := c.OutOrStdout()
			lost := 0
			if id == "" {
				sums, err := op.AuditSummary(ctx, t1, t2)
				if err != nil {
					return opsErr(err)
				}
				for _, s := range sums {
					lost += s.Lost
				}
				if f.asJSON {
					err = printJSON(out, sums)
				} else {
					err = printAuditSummary(out, sums)
				}
				if err != nil {
					return err
				}
			} else {
				rows, err := op.Audit(ctx, id, t1, t2)
				if err != nil {
					return opsErr(err)
				}
				for _, r := range rows {
					if r.Fate == ops.FateLost {
						lost++
					}
				}
				if f.asJSON {
					err = printJSON(out, rows)
				} else {
					err = printAudit(out, rows)
				}
				if err != nil {
					return err
				}
			}
			if lost > 0 {
				return withCode(exitFailure, fmt.Errorf("%d ticks lost: the tick mark passed them and no run or skip of them is recorded (docs/OPERATING.md, \"Auditing ticks\")", lost))
			}
			return nil
		},
	}
	f.add(c)
	c.Flags().StringVar(&from, "from", "", "audit the ticks after T1 (RFC 3339, or a duration ago: 2h)")
	c.Flags().StringVar(&to, "to", "", "audit the ticks up to T2 (RFC 3339, or a duration ago; default now)")
	return c
}

// parseAgo reads an RFC 3339 time, or a duration meaning that long before
// now.
func parseAgo(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-01-10T06:00:00Z) or a duration ago (2h)", s)
}

func printAudit(w io.Writer, rows []ops.AuditTick) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no ticks in the range")
		return err
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TICK\tFATE\tREASON\tNODE\tRESULT\tLATENESS\tDURATION\tATTEMPTS\tFENCE\tRUN ID\tNOTE")
	lost := 0
	for _, r := range rows {
		fate := r.Fate
		switch {
		case r.Fate == ops.FateLost:
			fate, lost = "LOST !!", lost+1
		case r.Manual != nil && *r.Manual:
			fate += " (manual)"
		}
		late, dur, att, fence := "-", "-", "-", "-"
		if r.LatenessSeconds != nil {
			late = fmtDuration(secs(*r.LatenessSeconds))
		}
		if r.DurationSeconds != nil {
			dur = fmtDuration(secs(*r.DurationSeconds))
		}
		if r.Attempts != nil {
			att = strconv.Itoa(*r.Attempts)
		}
		if r.Fence != nil && *r.Fence != 0 {
			fence = strconv.FormatInt(*r.Fence, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", fmtTime(r.Tick), fate, deref(r.Reason), deref(r.Node),
			deref(r.Result), late, dur, att, fence, deref(r.RunID), oneLine(deref(r.Note), 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if m := rows[0].MarkAhead; m != nil {
		fmt.Fprintf(w, "MARK AHEAD: %s: its tick mark says %s, ahead of the clock: no tick will run before %s (docs/OPERATING.md, \"A tick mark ahead of the clock\")\n",
			safe(rows[0].Schedule), fmtTime(*m), fmtTime(*m))
	}
	_, err := fmt.Fprintf(w, "%d ticks: %s\n", len(rows), fateCounts(rows))
	return err
}

func fateCounts(rows []ops.AuditTick) string {
	n := map[string]int{}
	for _, r := range rows {
		n[r.Fate]++
	}
	parts := []string{}
	for _, f := range []string{ops.FateLost, ops.FateRan, ops.FateSkipped, ops.FatePending, ops.FateUnknown} {
		if n[f] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[f], f))
		}
	}
	return strings.Join(parts, ", ")
}

func printAuditSummary(w io.Writer, sums []ops.AuditSummary) error {
	if len(sums) == 0 {
		_, err := fmt.Fprintln(w, "no schedules")
		return err
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tRAN\tSKIPPED\tLOST\tPENDING\tUNKNOWN\t")
	for _, s := range sums {
		mark := ""
		if s.Lost > 0 {
			mark = "LOST !!"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", safe(s.Schedule), s.Ran, s.Skipped, s.Lost, s.Pending, s.Unknown, mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range sums {
		if s.MarkAhead != nil {
			fmt.Fprintf(w, "MARK AHEAD: %s: its tick mark says %s: no tick will run before %s\n", safe(s.Schedule), fmtTime(*s.MarkAhead), fmtTime(*s.MarkAhead))
		}
	}
	return nil
}

func secs(s float64) time.Duration { return time.Duration(s * 1e9) }

func deref[T any](p *T) string {
	if p == nil {
		return "-"
	}
	return dash(fmt.Sprint(*p))
}
