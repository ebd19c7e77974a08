package scheduler_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// spanRec is a RunTracer that keeps what it is told.
type spanRec struct {
	mu     sync.Mutex
	starts []scheduler.RunStart
	decs   []*scheduler.Decision
	ends   []scheduler.RunRecord
	// parents are the trace parents of the spans started, by start.
	parents []string
}

func (r *spanRec) StartRun(s scheduler.RunStart, d *scheduler.Decision) scheduler.RunSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts = append(r.starts, s)
	r.decs = append(r.decs, d)
	p := "00-" + s.RunID + "-" + strconv.Itoa(len(r.starts)) + "-01"
	r.parents = append(r.parents, p)
	return &recSpan{r: r, parent: p}
}

type recSpan struct {
	r      *spanRec
	parent string
}

func (s *recSpan) TraceParent() string { return s.parent }
func (s *recSpan) End(rec scheduler.RunRecord) {
	s.r.mu.Lock()
	s.r.ends = append(s.r.ends, rec)
	s.r.mu.Unlock()
}

// TestTracerSeesRunAndDecision: a traced locked run starts its span with
// the backend's granted decision, its job gets the span's trace parent,
// and its span ends once with the run's record; a node-local run has no
// decision.
func TestTracerSeesRunAndDecision(t *testing.T) {
	t.Parallel()
	tr := &spanRec{}
	locked, local := &countingJob{}, &countingJob{}
	h := newHarness(t, scheduler.Options{Tracer: tr},
		sched("locked", "* * * * * *", hints.RequireGlobal, locked),
		sched("local", "* * * * * *", hints.NodeLocal, local)).start()
	h.step(time.Second)
	h.rec.waitRuns(t, 2)
	h.stop()

	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.starts) != 2 || len(tr.ends) != 2 {
		t.Fatalf("%d starts and %d ends, want 2 of each", len(tr.starts), len(tr.ends))
	}
	byID := map[string]int{}
	for i, s := range tr.starts {
		byID[s.Schedule] = i
	}
	li, ni := byID["locked"], byID["local"]
	if d := tr.decs[li]; d == nil || d.Verdict != "granted" || d.Err != nil || d.End.Before(d.Start) {
		t.Errorf("locked run's decision %+v, want a granted round trip", d)
	}
	if tr.decs[ni] != nil {
		t.Errorf("node-local run has a decision %+v, want none", tr.decs[ni])
	}
	if s := tr.starts[li]; s.Fence <= 0 || s.Node != "node-a" || s.RunID == "" {
		t.Errorf("locked run's start %+v, want its fence, node and run id", s)
	}
	for _, j := range []struct {
		job *countingJob
		i   int
	}{{locked, li}, {local, ni}} {
		got := j.job.got()
		if len(got) != 1 || got[0].TraceParent != tr.parents[j.i] {
			t.Errorf("job of %s got ticks %+v, want its span's trace parent %q", tr.starts[j.i].Schedule, got, tr.parents[j.i])
		}
	}
	for _, e := range tr.ends {
		if e.Result != scheduler.ResultSuccess || e.TraceParent != tr.parents[byID[e.Schedule]] || e.Attempts != 1 {
			t.Errorf("span ended with %+v, want a success naming its trace parent", e)
		}
	}
}

// TestNoTracerNoTraceParent: without a tracer a job gets no trace parent.
func TestNoTracerNoTraceParent(t *testing.T) {
	t.Parallel()
	job := &countingJob{}
	h := newHarness(t, scheduler.Options{}, sched("locked", "* * * * * *", hints.RequireGlobal, job)).start()
	h.step(time.Second)
	h.rec.waitRuns(t, 1)
	if got := job.got(); len(got) != 1 || got[0].TraceParent != "" {
		t.Errorf("ticks %+v, want one with no trace parent", got)
	}
}
