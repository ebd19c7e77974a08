package ledger

import (
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestWriteRefusesLowerFences(t *testing.T) {
	res := Resource{Dir: t.TempDir()}
	write := func(fence int64) string {
		t.Helper()
		r, err := res.Write(Record{Event: EventBegin, Schedule: "s", Tick: t0, Node: "n", Fence: fence})
		if err != nil {
			t.Fatal(err)
		}
		return r.Result
	}
	for _, c := range []struct {
		fence int64
		want  string
	}{{5, Accepted}, {5, Accepted}, {4, Refused}, {6, Accepted}, {5, Refused}, {0, Accepted}} {
		if got := write(c.fence); got != c.want {
			t.Errorf("fence %d: %s, want %s", c.fence, got, c.want)
		}
	}
	other, err := res.Write(Record{Event: EventBegin, Schedule: "other", Tick: t0, Fence: 1})
	if err != nil || other.Result != Accepted {
		t.Errorf("another schedule's first write: %v %v, want accepted (fences are per schedule)", other.Result, err)
	}
	recs, err := res.Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 7 {
		t.Errorf("ledger has %d records, want 7", len(recs))
	}
}

// A job whose write waits for the flock (held here, as by a job stopped
// with SIGSTOP mid-write) keeps the time it began as its run's start, not
// the time the flock let it write: TestPausedHost counts the runs that
// began elsewhere during a pause by it.
func TestRunStartsWhenTheJobBeganNotWhenItWrote(t *testing.T) {
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := Resource{Dir: dir}.Write(Record{Event: EventBegin, Schedule: "g", Tick: t0, Node: "n", Fence: 1, PID: 7, Began: began})
		done <- err
	}()
	const held = 300 * time.Millisecond
	time.Sleep(held) // the length of the hold is the fault itself
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	recs, err := Resource{Dir: dir}.Read()
	if err != nil {
		t.Fatal(err)
	}
	runs := Runs(recs)
	if len(runs) != 1 {
		t.Fatalf("%d runs, want 1", len(runs))
	}
	if !runs[0].Start.Equal(began) || recs[0].Time.Sub(began) < held {
		t.Errorf("run start %v, record written %v; want the start at %v, the write at least %v later",
			runs[0].Start, recs[0].Time, began, held)
	}
}

// run appends a run's two records: begin at start, end after d.
func run(recs []Record, node string, tick time.Time, fence int64, pid int, start time.Time, d time.Duration, end string) []Record {
	recs = append(recs, Record{Event: EventBegin, Schedule: "g", Tick: tick, Node: node, Fence: fence, PID: pid, Time: start, Result: Accepted})
	if end != "" {
		recs = append(recs, Record{Event: EventEnd, Schedule: "g", Tick: tick, Node: node, Fence: fence, PID: pid, Time: start.Add(d), Result: end})
	}
	return recs
}

func TestCheck(t *testing.T) {
	sec := time.Second
	w := Window{From: t0, To: t0.Add(4 * sec), Every: sec}
	var recs []Record
	recs = run(recs, "a", t0, 1, 10, t0, 10*time.Millisecond, Accepted)
	recs = run(recs, "a", t0.Add(sec), 1, 11, t0.Add(sec), 10*time.Millisecond, Accepted)
	// tick 1 again on b: a double run that fencing did not catch
	recs = run(recs, "b", t0.Add(sec), 2, 20, t0.Add(sec+500*time.Millisecond), 10*time.Millisecond, Accepted)
	// tick 2 missed; tick 3 runs long on b and overlaps c's tick 4,
	// whose end was refused (caught)
	recs = run(recs, "b", t0.Add(3*sec), 2, 21, t0.Add(3*sec), 2*sec, Accepted)
	recs = run(recs, "c", t0.Add(4*sec), 3, 30, t0.Add(4*sec), 10*time.Millisecond, Refused)
	// a run killed before its end
	recs = run(recs, "c", t0.Add(5*sec), 3, 31, t0.Add(5*sec), 0, "")

	rep := Check(recs, "g", w)
	want := Report{Schedule: "g", Ticks: 5, Runs: 6, DoubleRuns: 1, DoubleClean: 1, Missed: 1,
		Overlaps: 1, OverlapsClean: 0, Refused: 1, Cancelled: 0, Unfinished: 1}
	if len(rep.Doubles) != 2 {
		t.Errorf("Doubles lists %d lines, want 2 (the double run, the overlap): %q", len(rep.Doubles), rep.Doubles)
	}
	rep.Doubles = nil
	if len(rep.MissedTicks) != 1 || !rep.MissedTicks[0].Equal(t0.Add(2*sec)) {
		t.Errorf("MissedTicks = %v, want [tick 2]", rep.MissedTicks)
	}
	rep.MissedTicks = nil
	if !reflect.DeepEqual(rep, want) {
		t.Errorf("Check =\n %+v\nwant\n %+v", rep, want)
	}
}

func TestCheckLocal(t *testing.T) {
	var recs []Record
	recs = run(recs, "a", t0, 0, 1, t0, time.Millisecond, Accepted)
	recs = run(recs, "b", t0, 0, 2, t0, time.Millisecond, Accepted)
	recs = run(recs, "a", t0, 0, 3, t0, time.Millisecond, Accepted)
	if got := CheckLocal(recs, "g"); got.Runs != 3 || got.Doubles != 1 {
		t.Errorf("CheckLocal = %+v, want 3 runs, 1 double", got)
	}
}

func TestCheckSpanOwnsItsTicksAndEarlierOverlaps(t *testing.T) {
	sec := time.Second
	var recs []Record
	// tick 0 runs long (refused at its end) and overlaps tick 1's run
	recs = run(recs, "a", t0, 1, 10, t0, 1500*time.Millisecond, Refused)
	recs = run(recs, "b", t0.Add(sec), 2, 20, t0.Add(sec), 10*time.Millisecond, Accepted)
	recs = run(recs, "b", t0.Add(2*sec), 2, 21, t0.Add(2*sec), 10*time.Millisecond, Accepted)

	first := CheckSpan(recs, "g", Window{From: t0, To: t0, Every: sec})
	if first.Runs != 1 || first.Overlaps != 1 || first.Refused != 1 || first.Ticks != 1 {
		t.Errorf("span of tick 0 = %+v, want 1 run, its overlap, its refusal", first)
	}
	rest := CheckSpan(recs, "g", Window{From: t0.Add(sec), To: t0.Add(2 * sec), Every: sec})
	if rest.Runs != 2 || rest.Overlaps != 0 || rest.Refused != 0 || rest.Missed != 0 {
		t.Errorf("span of ticks 1-2 = %+v, want 2 runs and nothing else", rest)
	}
}
