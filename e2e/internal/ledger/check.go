package ledger

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Run is one run of a job, paired from its begin and end records.
type Run struct {
	Schedule, Node string
	Tick           time.Time
	Fence          int64
	PID            int
	Start, End     time.Time // End is Start when the run never wrote its end
	Begin          string    // the begin write's result
	Ending         string    // the end write's result; "" when the run never ended (killed)
}

// Clean reports whether every fenced write of the run was accepted: a run
// that is not clean was caught by fencing (or cancelled) before it could
// do harm.
func (r Run) Clean() bool { return r.Begin == Accepted && r.Ending == Accepted }

// Runs pairs begin and end records into runs, ordered by start.
func Runs(recs []Record) []Run {
	type key struct {
		schedule, node string
		tick           int64
		pid            int
	}
	idx := map[key]int{}
	var runs []Run
	for _, r := range recs {
		k := key{r.Schedule, r.Node, r.Tick.UnixNano(), r.PID}
		switch r.Event {
		case EventBegin:
			idx[k] = len(runs)
			start := r.Time
			if !r.Began.IsZero() {
				start = r.Began // not when the flock let it write (Record.Began)
			}
			runs = append(runs, Run{Schedule: r.Schedule, Node: r.Node, Tick: r.Tick, Fence: r.Fence,
				PID: r.PID, Start: start, End: r.Time, Begin: r.Result})
		case EventEnd:
			if i, ok := idx[k]; ok {
				runs[i].End, runs[i].Ending = r.Time, r.Result
			}
		}
	}
	slices.SortStableFunc(runs, func(a, b Run) int { return a.Start.Compare(b.Start) })
	return runs
}

// Window is the span of ticks a check expects to have run: every Every
// from From to To, both included.
type Window struct {
	From, To time.Time
	Every    time.Duration
}

// Ticks lists the window's ticks.
func (w Window) Ticks() []time.Time {
	var out []time.Time
	if w.Every <= 0 {
		return out
	}
	for t := w.From; !t.After(w.To); t = t.Add(w.Every) {
		out = append(out, t)
	}
	return out
}

// Report is what Check found for one require_global schedule.
type Report struct {
	Schedule string
	Ticks    int // ticks expected in the window
	Runs     int // runs of the schedule (all, in or out of the window)
	// DoubleRuns counts ticks that more than one run started for;
	// DoubleClean those among them where more than one run had every
	// write accepted (a double run fencing did not catch).
	DoubleRuns, DoubleClean int
	Missed                  int         // ticks in the window with no run at all
	MissedTicks             []time.Time // those ticks, in order
	// Overlaps counts pairs of runs whose start..end intervals overlap;
	// OverlapsClean those where both runs had every write accepted.
	Overlaps, OverlapsClean int
	Refused                 int      // fenced writes refused: stale holders caught
	Cancelled               int      // runs cancelled before their last write (lock_lost)
	Unfinished              int      // runs that never wrote their end (killed)
	Doubles                 []string // one line per double run or overlap, for the test log
}

// Check checks require_global schedule id: one run per tick and no two
// runs at once, over every run in recs, with misses counted over window.
func Check(recs []Record, id string, w Window) Report {
	return check(recs, id, w, func(Run) bool { return true })
}

// CheckSpan is Check confined to the runs of the ticks in w: a long run
// cut into periods reports each period's runs once. An overlap belongs to
// the period of the run that started first; its partner may lie outside.
func CheckSpan(recs []Record, id string, w Window) Report {
	return check(recs, id, w, func(r Run) bool { return !r.Tick.Before(w.From) && !r.Tick.After(w.To) })
}

func check(recs []Record, id string, w Window, in func(Run) bool) Report {
	rep := Report{Schedule: id, Ticks: len(w.Ticks())}
	var runs []Run
	for _, r := range Runs(recs) {
		if r.Schedule == id {
			runs = append(runs, r)
		}
	}
	byTick := map[int64][]Run{}
	for _, r := range runs {
		if !in(r) {
			continue
		}
		rep.Runs++
		byTick[r.Tick.UnixNano()] = append(byTick[r.Tick.UnixNano()], r)
		if r.Begin == Refused {
			rep.Refused++
		}
		switch r.Ending {
		case Refused:
			rep.Refused++
		case Cancelled:
			if r.Begin == Accepted { // a refused begin ends the run itself
				rep.Cancelled++
			}
		case "":
			rep.Unfinished++
		}
	}
	for _, t := range w.Ticks() {
		if len(byTick[t.UnixNano()]) == 0 {
			rep.Missed++
			rep.MissedTicks = append(rep.MissedTicks, t)
		}
	}
	ticks := make([]int64, 0, len(byTick))
	for t := range byTick {
		ticks = append(ticks, t)
	}
	slices.Sort(ticks)
	for _, t := range ticks {
		rs := byTick[t]
		if len(rs) < 2 {
			continue
		}
		rep.DoubleRuns++
		clean := 0
		for _, r := range rs {
			if r.Clean() {
				clean++
			}
		}
		if clean > 1 {
			rep.DoubleClean++
		}
		rep.Doubles = append(rep.Doubles, fmt.Sprintf("tick %s ran %d times: %s",
			time.Unix(0, t).UTC().Format(time.RFC3339), len(rs), describe(rs...)))
	}
	// Runs are sorted by start: each overlaps those after it that start
	// before it ends.
	for i, a := range runs {
		if !in(a) {
			continue
		}
		for _, b := range runs[i+1:] {
			if !b.Start.Before(a.End) {
				break
			}
			rep.Overlaps++
			if a.Clean() && b.Clean() {
				rep.OverlapsClean++
			}
			rep.Doubles = append(rep.Doubles, "overlap: "+describe(a, b))
		}
	}
	return rep
}

// LocalReport is what CheckLocal found for one node_local schedule.
type LocalReport struct {
	Schedule string
	Runs     int
	Doubles  int // (node, tick) pairs that ran more than once
}

// CheckLocal checks node_local schedule id: at most one run per node per tick.
func CheckLocal(recs []Record, id string) LocalReport {
	rep := LocalReport{Schedule: id}
	type key struct {
		node string
		tick int64
	}
	seen := map[key]int{}
	for _, r := range Runs(recs) {
		if r.Schedule != id {
			continue
		}
		rep.Runs++
		k := key{r.Node, r.Tick.UnixNano()}
		seen[k]++
		if seen[k] == 2 {
			rep.Doubles++
		}
	}
	return rep
}

// NodesOf returns the nodes that ran schedule id, with their run counts.
func NodesOf(recs []Record, id string) map[string]int {
	out := map[string]int{}
	for _, r := range Runs(recs) {
		if r.Schedule == id {
			out[r.Node]++
		}
	}
	return out
}

func describe(rs ...Run) string {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b Run) int { return cmp.Compare(a.Start.UnixNano(), b.Start.UnixNano()) })
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += "; "
		}
		end := r.Ending
		if end == "" {
			end = "never ended"
		}
		s += fmt.Sprintf("%s tick %s fence %d pid %d %s..%s begin %s end %s", r.Node,
			r.Tick.UTC().Format("15:04:05"), r.Fence, r.PID, r.Start.UTC().Format("15:04:05.000"),
			r.End.UTC().Format("15:04:05.000"), r.Begin, end)
	}
	return s
}
