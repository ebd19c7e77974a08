package clustertest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
)

// skip builds a skip of schedule at tick base+sec seconds, with every field
// set (so a field a backend forgets shows up).
func skip(schedule string, sec int, node, reason string) cluster.Skip {
	tick := base.Add(time.Duration(sec) * time.Second)
	return cluster.Skip{
		Schedule: schedule,
		Tick:     tick,
		Node:     node,
		Reason:   reason,
		Note:     fmt.Sprintf("note of %d", sec),
		At:       tick.Add(250 * time.Microsecond),
	}
}

// sameSkip reports the first difference between two skips, "" if none.
func sameSkip(got, want cluster.Skip) string {
	switch {
	case got.Schedule != want.Schedule:
		return fmt.Sprintf("schedule %q, want %q", got.Schedule, want.Schedule)
	case !got.Tick.Equal(want.Tick):
		return fmt.Sprintf("tick %v, want %v", got.Tick, want.Tick)
	case got.Node != want.Node:
		return fmt.Sprintf("node %q, want %q", got.Node, want.Node)
	case got.Reason != want.Reason:
		return fmt.Sprintf("reason %q, want %q", got.Reason, want.Reason)
	case got.Note != want.Note:
		return fmt.Sprintf("note %q, want %q", shorten(got.Note), shorten(want.Note))
	case !got.At.Equal(want.At):
		return fmt.Sprintf("at %v, want %v", got.At, want.At)
	}
	return ""
}

func (s *suite) skips(st cluster.Store, schedule string, limit int) []cluster.Skip {
	s.t.Helper()
	ks, err := st.Skips(s.ctx, schedule, limit)
	s.check(err, fmt.Sprintf("Skips(%s, %d)", schedule, limit))
	return ks
}

func (s *suite) wantSkips(got, want []cluster.Skip, what string) {
	s.t.Helper()
	if len(got) != len(want) {
		s.t.Fatalf("%s: %d skips %v, want %d %v", what, len(got), skipTicks(got), len(want), skipTicks(want))
	}
	for i := range want {
		if d := sameSkip(got[i], want[i]); d != "" {
			s.t.Fatalf("%s: skip %d (tick %s): %s", what, i, want[i].Tick.Format(time.RFC3339), d)
		}
	}
}

func skipTicks(ks []cluster.Skip) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.Tick.Format("15:04:05") + "/" + k.Reason + "@" + k.Node
	}
	return out
}

// Skips recorded by two nodes, in batches out of tick order, come back
// newest tick first; the same tick recorded again (another node saw the
// same decision, or a batch was resent) keeps its first record; another
// schedule's skips stay apart, and so do its runs.
func caseSkipsOrderOnePerTick(s *suite) {
	a, b := s.store(), s.store()
	first := []cluster.Skip{skip("job", 4, "node-a", cluster.SkipPaused), skip("job", 1, "node-a", cluster.SkipMissed), skip("job", 7, "node-a", cluster.SkipOverlap)}
	s.check(a.RecordSkips(s.ctx, first, 100), "RecordSkips from node-a")
	second := []cluster.Skip{
		skip("job", 4, "node-b", cluster.SkipOverlap), // the same tick, again: dropped
		skip("job", 2, "node-b", cluster.SkipStopped),
		skip("job", 2, "node-b", cluster.SkipPaused), // twice in one batch: the first kept
		skip("job", 9, "node-b", cluster.SkipStopped),
	}
	s.check(b.RecordSkips(s.ctx, second, 100), "RecordSkips from node-b")
	s.check(a.RecordSkips(s.ctx, first, 100), "RecordSkips of node-a's batch resent")
	s.check(b.RecordSkips(s.ctx, []cluster.Skip{skip("other-job", 3, "node-b", cluster.SkipPaused)}, 100), "RecordSkips of other-job")
	s.check(b.RecordSkips(s.ctx, nil, 100), "RecordSkips of no skips")
	s.check(a.RecordRuns(s.ctx, []cluster.Run{run("job", 3, "node-a")}, 100), "RecordRuns")

	want := []cluster.Skip{second[3], first[2], first[0], second[1], first[1]}
	for _, st := range []cluster.Store{a, b} {
		s.wantSkips(s.skips(st, "job", 100), want, "Skips(job, 100)")
	}
	s.wantSkips(s.skips(a, "job", 2), want[:2], "Skips(job, 2)")
	s.wantSkips(s.skips(a, "other-job", 10), []cluster.Skip{skip("other-job", 3, "node-b", cluster.SkipPaused)}, "Skips(other-job)")
	if got := s.skips(a, "no-such-job", 10); len(got) != 0 {
		s.t.Fatalf("Skips of a schedule without any = %v, want none", skipTicks(got))
	}
	// Skips are not runs: history holds the one run, LastRuns names it.
	s.wantRuns(s.runs(b, "job", 100), []cluster.Run{run("job", 3, "node-a")}, "Runs beside skips")
	last, err := b.LastRuns(s.ctx, []string{"job", "other-job"})
	s.check(err, "LastRuns")
	if len(last) != 1 || last["job"].RunID != run("job", 3, "node-a").RunID {
		s.t.Fatalf("LastRuns beside skips = %v, want job's one run only", last)
	}
}

// keep bounds a schedule's skips apart from its runs: after every
// RecordSkips it holds at most 2×keep skips, among them the newest keep
// ticks, and a schedule whose every tick is skipped keeps all its runs.
func caseSkipsKeep(s *suite) {
	a, b := s.store(), s.store()
	const keep = 5
	runs := []cluster.Run{run("job", 0, "node-a"), run("job", 1, "node-a")}
	s.check(a.RecordRuns(s.ctx, runs, keep), "RecordRuns")
	var all []cluster.Skip
	for sec := 10; sec < 10+6*keep; sec++ {
		st := a
		if sec%3 == 0 {
			st = b
		}
		k := skip("job", sec, "node-a", cluster.SkipPaused)
		s.check(st.RecordSkips(s.ctx, []cluster.Skip{k}, keep), "RecordSkips")
		all = append(all, k)
		got := s.skips(a, "job", 1000)
		if len(got) > 2*keep {
			s.t.Fatalf("after %d skips with keep %d: %d kept, want at most %d", len(all), keep, len(got), 2*keep)
		}
		newest := min(len(all), keep)
		want := slices.Clone(all[len(all)-newest:])
		slices.Reverse(want)
		s.wantSkips(got[:min(len(got), newest)], want, "the newest skips")
	}
	// One batch of 4×keep skips: trimmed too.
	var batch []cluster.Skip
	for sec := 100; sec < 100+4*keep; sec++ {
		batch = append(batch, skip("job", sec, "node-b", cluster.SkipStopped))
	}
	s.check(b.RecordSkips(s.ctx, batch, keep), "RecordSkips of one big batch")
	if got := s.skips(a, "job", 1000); len(got) > 2*keep || len(got) < keep || !got[0].Tick.Equal(batch[len(batch)-1].Tick) {
		s.t.Fatalf("after one batch of %d skips, keep %d: %v", len(batch), keep, skipTicks(got))
	}
	s.wantRuns(s.runs(b, "job", 100), []cluster.Run{runs[1], runs[0]}, "Runs after many skips")
}

// Every field comes back as recorded; a note over its bound is cut as a
// run's error is (cluster.BoundSkip), and the same cut as on every
// backend.
func caseSkipFields(s *suite) {
	a := s.store()
	k := skip("job", 1, "node-a", cluster.SkipPaused)
	k.Note = "maintenance: é" + strings.Repeat("x", 2*cluster.MaxErrorLen) + "\nsecond line"
	k.At = k.At.Add(1234 * time.Microsecond)
	s.check(a.RecordSkips(s.ctx, []cluster.Skip{k}, 10), "RecordSkips")
	got := s.skips(s.store(), "job", 10)
	s.wantSkips(got, []cluster.Skip{cluster.BoundSkip(k)}, "the skip read back")
	if len(got[0].Note) > cluster.MaxErrorLen {
		s.t.Fatalf("note of %d bytes kept, want at most %d", len(got[0].Note), cluster.MaxErrorLen)
	}
}

// A run's provisional record (Attempts 0, Result running: written when it
// started) is replaced by its final record, whichever node records it and
// in whichever batch; a provisional record that comes after the final one
// is not stored.
func caseRunRunningReplaced(s *suite) {
	a, b := s.store(), s.store()
	running := func(sec int) cluster.Run {
		r := run("job", sec, "node-a")
		r.Attempts, r.Result, r.Duration, r.Error, r.OutputTail = 0, cluster.ResultRunning, 0, "", ""
		return r
	}
	final := func(sec int) cluster.Run {
		r := run("job", sec, "node-a")
		r.Attempts = 1
		return r
	}
	s.check(a.RecordRuns(s.ctx, []cluster.Run{running(1)}, 100), "RecordRuns of a run started")
	s.wantRuns(s.runs(b, "job", 100), []cluster.Run{running(1)}, "Runs while it runs")
	last, err := b.LastRuns(s.ctx, []string{"job"})
	s.check(err, "LastRuns")
	if last["job"].Result != cluster.ResultRunning {
		s.t.Fatalf("LastRuns while it runs = %+v, want its running record", last["job"])
	}
	s.check(b.RecordRuns(s.ctx, []cluster.Run{final(1)}, 100), "RecordRuns of the run ended")
	s.wantRuns(s.runs(a, "job", 100), []cluster.Run{final(1)}, "Runs once it ended")
	// Its running record again, late: not stored.
	s.check(a.RecordRuns(s.ctx, []cluster.Run{running(1)}, 100), "RecordRuns of a late running record")
	s.wantRuns(s.runs(a, "job", 100), []cluster.Run{final(1)}, "Runs after a late running record")
	// Both in one batch, either order.
	s.check(a.RecordRuns(s.ctx, []cluster.Run{running(2), final(2), final(3), running(3)}, 100), "RecordRuns of both in one batch")
	s.wantRuns(s.runs(b, "job", 100), []cluster.Run{final(3), final(2), final(1)}, "Runs after one batch of both")
	// A run whose node died stays running.
	s.check(a.RecordRuns(s.ctx, []cluster.Run{running(4)}, 100), "RecordRuns of a run whose node dies")
	s.wantRuns(s.runs(b, "job", 100), []cluster.Run{running(4), final(3), final(2), final(1)}, "Runs after a node died running")
}
