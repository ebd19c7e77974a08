package clustertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/bext-dev/bext-scheduler/cluster"
)

// Runs recorded by three nodes, in batches whose order is not the order of
// StartedAt, come back newest first by StartedAt; another schedule's runs
// stay apart.
func caseRunsOrder(s *suite) {
	a, b, c := s.store(), s.store(), s.store()
	// StartedAt seconds per node: interleaved, and each batch shuffled.
	batches := []struct {
		st   cluster.Store
		node string
		secs []int
	}{
		{a, "node-a", []int{4, 0, 8}},
		{b, "node-b", []int{1, 9, 5}},
		{c, "node-c", []int{6, 2}},
		{a, "node-a", []int{3, 7}}, // a late batch of older runs
	}
	var all []cluster.Run
	for _, bt := range batches {
		var rs []cluster.Run
		for _, sec := range bt.secs {
			rs = append(rs, run("job", sec, bt.node))
		}
		s.check(bt.st.RecordRuns(s.ctx, rs, 100), "RecordRuns from "+bt.node)
		all = append(all, rs...)
	}
	s.check(b.RecordRuns(s.ctx, []cluster.Run{run("other-job", 100, "node-b")}, 100), "RecordRuns of other-job")
	s.check(b.RecordRuns(s.ctx, nil, 100), "RecordRuns of no runs")

	want := slices.Clone(all)
	slices.SortFunc(want, func(x, y cluster.Run) int { return y.StartedAt.Compare(x.StartedAt) })
	for _, st := range []cluster.Store{a, b, c} {
		s.wantRuns(s.runs(st, "job", 100), want, "Runs(job, 100)")
	}
	s.wantRuns(s.runs(c, "other-job", 100), []cluster.Run{run("other-job", 100, "node-b")}, "Runs(other-job, 100)")
	if got := s.runs(c, "no-such-job", 10); len(got) != 0 {
		s.t.Fatalf("Runs of a schedule without history = %v, want none", runIDs(got))
	}
}

// limit cuts the newest first; a limit past the history returns all.
func caseRunsLimit(s *suite) {
	a, b := s.store(), s.store()
	var want []cluster.Run
	for sec := range 10 {
		st := a
		if sec%2 == 1 {
			st = b
		}
		r := run("job", sec, fmt.Sprint("node-", sec%2))
		s.check(st.RecordRuns(s.ctx, []cluster.Run{r}, 100), "RecordRuns")
		want = append([]cluster.Run{r}, want...)
	}
	s.wantRuns(s.runs(a, "job", 1), want[:1], "Runs(job, 1)")
	s.wantRuns(s.runs(b, "job", 4), want[:4], "Runs(job, 4)")
	s.wantRuns(s.runs(a, "job", 10), want, "Runs(job, 10)")
	s.wantRuns(s.runs(b, "job", 1000), want, "Runs(job, 1000)")
}

// keep bounds a history: after every RecordRuns it holds at most 2×keep
// runs, among them the newest keep; other schedules are not trimmed.
func caseKeep(s *suite) {
	a, b := s.store(), s.store()
	const keep = 5
	s.check(a.RecordRuns(s.ctx, []cluster.Run{run("untouched", 0, "node-a")}, keep), "RecordRuns(untouched)")
	var recorded []cluster.Run
	for sec := range 6 * keep {
		st := a
		if sec%3 == 0 {
			st = b
		}
		r := run("job", sec, "node")
		s.check(st.RecordRuns(s.ctx, []cluster.Run{r}, keep), fmt.Sprintf("RecordRuns(run %d)", sec))
		recorded = append([]cluster.Run{r}, recorded...)
		s.wantTrimmed(a, "job", recorded, keep, fmt.Sprintf("after %d runs", sec+1))
	}
	s.wantRuns(s.runs(b, "untouched", 100), []cluster.Run{run("untouched", 0, "node-a")}, "the other schedule's history")
}

// One batch of many runs of one schedule is trimmed too.
func caseKeepBatch(s *suite) {
	st := s.store()
	const keep = 4
	var batch, newestFirst []cluster.Run
	for sec := range 5 * keep {
		r := run("job", sec, "node")
		batch = append(batch, r)
		newestFirst = append([]cluster.Run{r}, newestFirst...)
	}
	s.check(st.RecordRuns(s.ctx, batch, keep), "RecordRuns of 20 runs with keep 4")
	s.wantTrimmed(st, "job", newestFirst, keep, "after one batch")
}

// wantTrimmed checks a history against everything recorded (newest first):
// between keep and 2×keep of the newest, and the newest keep present.
func (s *suite) wantTrimmed(st cluster.Store, schedule string, recorded []cluster.Run, keep int, what string) {
	s.t.Helper()
	got := s.runs(st, schedule, 10*keep)
	if len(got) > 2*keep {
		s.t.Fatalf("%s: history of %q holds %d runs with keep %d, want at most %d", what, schedule, len(got), keep, 2*keep)
	}
	n := min(len(recorded), keep)
	if len(got) < n {
		s.t.Fatalf("%s: history of %q holds %d runs %v, want the newest %d at least", what, schedule, len(got), runIDs(got), n)
	}
	s.wantRuns(got[:n], recorded[:n], what+": the newest keep runs")
	// What is kept beyond keep is a prefix of the rest, newest first.
	s.wantRuns(got, recorded[:len(got)], what+": the whole history")
}

// A run's fields are stored as cluster.Bound makes them: one line of error,
// the output's last 4 KiB, valid UTF-8.
func caseBound(s *suite) {
	st := s.store()
	long := run("job", 1, "node")
	long.Error = "first line of the error\nsecond line with secrets"
	long.OutputTail = strings.Repeat("0123456789abcdef", 3*cluster.MaxOutputTail/16) + "THE END"
	huge := run("job", 2, "node")
	huge.Error = strings.Repeat("é", cluster.MaxErrorLen) // 2 bytes each: cut in a character's middle
	huge.OutputTail = "\x00\xff" + strings.Repeat("€", cluster.MaxOutputTail) + "\x00tail\xfe"
	crlf := run("job", 3, "node")
	crlf.Error = "windows line\r\nnext"
	crlf.OutputTail = ""
	s.check(st.RecordRuns(s.ctx, []cluster.Run{long, huge, crlf}, 100), "RecordRuns")
	got := s.runs(st, "job", 10)
	s.wantRuns(got, []cluster.Run{cluster.Bound(crlf), cluster.Bound(huge), cluster.Bound(long)}, "Runs after Bound")
	// The bounds themselves, so a broken Bound cannot pass unseen.
	if got[2].Error != "first line of the error" {
		s.t.Fatalf("stored error %q, want its first line only", got[2].Error)
	}
	if n := len(got[2].OutputTail); n != cluster.MaxOutputTail || !strings.HasSuffix(got[2].OutputTail, "THE END") {
		s.t.Fatalf("stored output %d bytes ending %q, want the last %d bytes", n, got[2].OutputTail[max(0, n-7):], cluster.MaxOutputTail)
	}
	if len(got[1].Error) > cluster.MaxErrorLen || len(got[1].OutputTail) > cluster.MaxOutputTail {
		s.t.Fatalf("stored error %d bytes and output %d bytes, want at most %d and %d",
			len(got[1].Error), len(got[1].OutputTail), cluster.MaxErrorLen, cluster.MaxOutputTail)
	}
}

// Every field round-trips, including zero ones.
func caseRunFields(s *suite) {
	st := s.store()
	zero := cluster.Run{Schedule: "job", RunID: "r-zero", StartedAt: base, Tick: base}
	full := run("job", 7, "node-x")
	full.Manual, full.Attempts, full.Fence = true, 3, 1<<53-1
	s.check(st.RecordRuns(s.ctx, []cluster.Run{zero, full}, 10), "RecordRuns")
	s.wantRuns(s.runs(st, "job", 10), []cluster.Run{full, zero}, "Runs")
}

// runFields are the JSON names of a run (DESIGN.md "Operating it").
var runFields = []string{"anomaly", "attempts", "by", "duration_seconds", "error", "fence", "manual", "node",
	"output_tail", "result", "run_id", "schedule", "started_at", "tick"}

// A run from the store encodes with every contract name present (also when
// empty), fence as a number, and decodes back to itself.
func caseRunJSON(s *suite) {
	st := s.store()
	r := run("job", 3, "node")
	r.Error, r.OutputTail = "", ""
	s.check(st.RecordRuns(s.ctx, []cluster.Run{r}, 10), "RecordRuns")
	got := s.runs(st, "job", 1)
	if len(got) != 1 {
		s.t.Fatalf("Runs = %d runs, want 1", len(got))
	}
	b, err := json.Marshal(got[0])
	s.check(err, "json.Marshal(run)")
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	s.check(dec.Decode(&m), "decoding the run's JSON")
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, runFields) {
		s.t.Fatalf("run JSON has fields %v, want exactly %v: %s", keys, runFields, b)
	}
	if n, ok := m["fence"].(json.Number); !ok || n.String() != fmt.Sprint(r.Fence) {
		s.t.Fatalf("run JSON fence = %#v, want the number %d", m["fence"], r.Fence)
	}
	if d, ok := m["duration_seconds"].(json.Number); !ok || d.String() != fmt.Sprint(float64(r.Duration)/1e9) {
		s.t.Fatalf("run JSON duration_seconds = %#v, want the number %v", m["duration_seconds"], float64(r.Duration)/1e9)
	}
	var back cluster.Run
	s.check(json.Unmarshal(b, &back), "json.Unmarshal(run)")
	if d := sameRun(back, r); d != "" {
		s.t.Fatalf("run after a JSON round trip: %s (%s)", d, b)
	}
}

// LastRuns answers the newest run of each schedule that has one.
func caseLastRuns(s *suite) {
	a, b := s.store(), s.store()
	s.check(a.RecordRuns(s.ctx, []cluster.Run{run("x", 5, "a"), run("y", 1, "a"), run("x", 3, "a")}, 10), "RecordRuns on a")
	s.check(b.RecordRuns(s.ctx, []cluster.Run{run("x", 4, "b"), run("y", 2, "b")}, 10), "RecordRuns on b")
	got, err := b.LastRuns(s.ctx, []string{"x", "y", "never-ran"})
	s.check(err, "LastRuns")
	if len(got) != 2 {
		s.t.Fatalf("LastRuns = %d schedules %v, want x and y only", len(got), got)
	}
	for id, want := range map[string]cluster.Run{"x": run("x", 5, "a"), "y": run("y", 2, "b")} {
		if d := sameRun(got[id], want); d != "" {
			s.t.Fatalf("LastRuns[%q]: %s", id, d)
		}
	}
	got, err = a.LastRuns(s.ctx, nil)
	s.check(err, "LastRuns(nil)")
	if len(got) != 0 {
		s.t.Fatalf("LastRuns(nil) = %v, want empty", got)
	}
}

// A run recorded unstarted (Attempts 0: a manual run given back before it
// started, recorded lock_lost under its request's id) is replaced by the
// real run of the same run id once that one is recorded (Attempts > 0),
// whichever node records it; never the other way: an unstarted record
// that comes after the real run is not stored. Other runs stay.
func caseRunUnstartedReplaced(s *suite) {
	a, b := s.store(), s.store()
	unstarted := func(sec int, id string) cluster.Run {
		r := run("job", sec, "node-a")
		r.RunID, r.Attempts, r.Result, r.Duration, r.Manual = id, 0, "lock_lost", 0, true
		return r
	}
	real := func(sec int, id string) cluster.Run {
		r := run("job", sec, "node-b")
		r.RunID, r.Attempts, r.Manual = id, 1, true
		return r
	}
	other := run("job", 2, "node-a")
	// The unstarted record first, the real run later from another node.
	u1, r1 := unstarted(1, "req-1"), real(5, "req-1")
	s.check(a.RecordRuns(s.ctx, []cluster.Run{u1, other}, 100), "RecordRuns of the unstarted run")
	s.wantRuns(s.runs(b, "job", 100), []cluster.Run{other, u1}, "Runs before the real run")
	s.check(b.RecordRuns(s.ctx, []cluster.Run{r1}, 100), "RecordRuns of the real run")
	s.wantRuns(s.runs(a, "job", 100), []cluster.Run{r1, other}, "Runs after the real run")
	// The real run first: a late unstarted record of it is not stored.
	r2, u2 := real(7, "req-2"), unstarted(8, "req-2")
	s.check(b.RecordRuns(s.ctx, []cluster.Run{r2}, 100), "RecordRuns of the second real run")
	s.check(a.RecordRuns(s.ctx, []cluster.Run{u2}, 100), "RecordRuns of its late unstarted record")
	s.wantRuns(s.runs(b, "job", 100), []cluster.Run{r2, r1, other}, "Runs after a late unstarted record")
	// Both in one batch, the real run first or last: the real run only.
	u3, r3 := unstarted(9, "req-3"), real(10, "req-3")
	u4, r4 := unstarted(12, "req-4"), real(11, "req-4")
	s.check(a.RecordRuns(s.ctx, []cluster.Run{u3, r3, r4, u4}, 100), "RecordRuns of both in one batch")
	s.wantRuns(s.runs(b, "job", 100), []cluster.Run{r4, r3, r2, r1, other}, "Runs after one batch of both")
}

// A run's anomaly and who asked for it are stored and read back, by Runs
// and LastRuns, on every path: each value of each, a final record
// replacing a provisional one that had neither (the node decides the
// anomaly once the run ended), and a real run replacing an unstarted
// record of its request. A by past MaxErrorLen is cut as an error is.
func caseRunAnomalyAndBy(s *suite) {
	a, b := s.store(), s.store()
	mk := func(sec int, anomaly, by string) cluster.Run {
		r := run("job", sec, "node-a")
		r.Anomaly, r.By, r.Attempts = anomaly, by, 1
		return r
	}
	plain := mk(1, "", "")
	over := mk(2, cluster.AnomalyOverrun, "")
	fast := mk(3, cluster.AnomalyTooFast, "alice@host-1")
	asked := mk(4, "", "api 10.0.0.7")
	s.check(a.RecordRuns(s.ctx, []cluster.Run{plain, over, fast, asked}, 100), "RecordRuns")
	s.wantRuns(s.runs(b, "job", 100), []cluster.Run{asked, fast, over, plain}, "Runs")

	// A provisional record has no anomaly yet; its final has one.
	running := mk(5, "", "bob@host-2")
	running.Attempts, running.Result, running.Duration = 0, cluster.ResultRunning, 0
	final := mk(5, cluster.AnomalyOverrun, "bob@host-2")
	s.check(a.RecordRuns(s.ctx, []cluster.Run{running}, 100), "RecordRuns of the provisional record")
	s.check(b.RecordRuns(s.ctx, []cluster.Run{final}, 100), "RecordRuns of the final record")
	last, err := a.LastRuns(s.ctx, []string{"job"})
	s.check(err, "LastRuns")
	if d := sameRun(last["job"], final); d != "" {
		s.t.Fatalf("LastRuns after the final record: %s", d)
	}

	// An unstarted record of a request, then its real run.
	given := mk(6, "", "carol@host-3")
	given.Attempts, given.Result = 0, "lock_lost"
	ran := mk(6, cluster.AnomalyTooFast, "carol@host-3")
	s.check(a.RecordRuns(s.ctx, []cluster.Run{given}, 100), "RecordRuns of the unstarted record")
	s.check(b.RecordRuns(s.ctx, []cluster.Run{ran}, 100), "RecordRuns of its real run")
	s.wantRuns(s.runs(a, "job", 100), []cluster.Run{ran, final, asked, fast, over, plain}, "Runs after the replacements")

	long := mk(7, "", strings.Repeat("b", cluster.MaxErrorLen+10))
	s.check(a.RecordRuns(s.ctx, []cluster.Run{long}, 100), "RecordRuns of a long by")
	got := s.runs(b, "job", 1)
	if len(got) != 1 {
		s.t.Fatalf("Runs(job, 1) = %d runs, want 1", len(got))
	}
	if len(got[0].By) != cluster.MaxErrorLen {
		s.t.Fatalf("a by of %d bytes read back with %d bytes, want %d", len(long.By), len(got[0].By), cluster.MaxErrorLen)
	}
}
