package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/ops"
)

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// fmtTime is how tables show a time: RFC 3339, UTC, whole seconds.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// fmtDuration rounds a duration for a table: milliseconds under a second,
// hundredths under a minute, seconds above.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// dash is a table cell of text from the cluster state: "-" when empty,
// escaped (safe) otherwise.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return safe(s)
}

// oneLine keeps a free-text cell on one line of at most n characters,
// escaped (safe).
func oneLine(s string, n int) string {
	s = safe(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return dash(s)
}

func printStatus(w io.Writer, st ops.Status) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tHINT\tPAUSED\tNEXT TICK\tLAST TICK\tNODE\tRESULT\tDURATION\tLAST SUCCESS\tFAILS\tNOTE")
	for _, s := range st.Schedules {
		paused := "no"
		if s.Paused {
			paused = "yes"
			if !s.Pause.Until.IsZero() {
				paused = "until " + fmtTime(s.Pause.Until)
			}
		}
		next := "-"
		if s.NextTick != nil {
			next = fmtTime(*s.NextTick)
		}
		last, node, result, dur := "-", "-", "-", "-"
		if r := s.LastRun; r != nil {
			last, node, result, dur = fmtTime(r.Tick), dash(r.Node), dash(r.Result), fmtDuration(r.Duration)
			if r.Manual {
				result += " (manual)"
			}
			if r.Anomaly != "" {
				result += " (" + r.Anomaly + ")"
			}
		}
		success := "-"
		if s.LastSuccess != nil {
			success = fmtTime(*s.LastSuccess)
		}
		note := "-"
		if s.Paused {
			note = oneLine(s.Pause.Note, 40)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", safe(s.ID), dash(s.Hint), paused, next, last, node, result, dur,
			success, s.FailuresInARow, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printLive(w, st, time.Now()); err != nil {
		return err
	}
	for _, s := range st.Schedules {
		if s.MarkAhead != nil {
			fmt.Fprintf(w, "MARK AHEAD: %s: its tick mark says %s, ahead of the clock: no tick of it runs before then (docs/OPERATING.md, \"A tick mark ahead of the clock\")\n",
				safe(s.ID), fmtTime(*s.MarkAhead))
		}
		if s.NoNode {
			fmt.Fprintf(w, "NO NODE: %s: no live node has every tag of nodes = [%s]: none asks for its ticks (audit shows them skipped, no_node)\n",
				safe(s.ID), safe(strings.Join(s.Nodes, " ")))
		}
	}
	fmt.Fprintln(w)
	if len(st.Nodes) == 0 {
		fmt.Fprintln(w, "no live nodes")
	} else {
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tVERSION\tSTARTED\tLAST SEEN\tREADY\tCLOCK OFFSET\tCONFIG\tTAGS")
		for _, n := range st.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", safe(n.NodeID), safe(dash(n.Version)), fmtTime(n.StartedAt), fmtTime(n.LastSeen),
				yesNo(n.Ready), fmtOffset(n.ClockOffsetSeconds), safe(dash(n.ConfigHash)), safe(dash(strings.Join(n.Tags, ","))))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	d := st.ConfigDrift
	if !d.Drifted {
		fmt.Fprintln(w, "config drift: none")
		return nil
	}
	fmt.Fprintln(w, "CONFIG DRIFT: the live nodes run different schedules")
	if len(d.Schedules) == 0 {
		fmt.Fprintln(w, "  (their config hashes differ; no schedule hash tells which)")
	}
	for _, s := range d.Schedules {
		sides := make([]string, 0, len(s.Sides))
		for _, side := range s.Sides {
			what := "absent"
			if side.Hash != "" {
				what = side.Hash
			}
			sides = append(sides, fmt.Sprintf("%s on %s", what, strings.Join(side.Nodes, ", ")))
		}
		what := ""
		if w := s.What(); w != "" {
			what = " (" + w + ")"
		}
		fmt.Fprintf(w, "  %s: %s%s\n", safe(s.ID), safe(strings.Join(sides, "; ")), what)
	}
	return nil
}

func printRuns(w io.Writer, runs []ops.Run) error {
	if len(runs) == 0 {
		_, err := fmt.Fprintln(w, "no runs recorded")
		return err
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TICK\tNODE\tRESULT\tSTARTED\tDURATION\tATTEMPTS\tFENCE\tMANUAL\tRUN ID\tERROR")
	for _, r := range runs {
		manual := "-"
		if r.Manual {
			manual = "yes"
		}
		fence := "-"
		if r.Fence != 0 {
			fence = strconv.FormatInt(r.Fence, 10)
		}
		result := r.Result
		if r.Anomaly != "" {
			result += " (" + r.Anomaly + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", fmtTime(r.Tick), dash(r.Node), dash(result),
			fmtTime(r.StartedAt), fmtDuration(r.Duration), r.Attempts, fence, manual, dash(r.RunID), oneLine(r.Error, 80))
	}
	return tw.Flush()
}
