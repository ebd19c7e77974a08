package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The ledger is the harness's own account of what ran: every attempt of
// every job, written by the job itself on the true (backend) time, so the
// invariants never take the code under test's word for what it did. The
// history is what the nodes reported (RunRecorded), kept apart to be
// checked against the ledger.

// attempt is one attempt of a job, as the job saw it.
type attempt struct {
	sched   string
	tick    time.Time
	node    string
	life    int
	runID   string
	attempt int
	fence   int64
	manual  bool
	start   time.Time
	end     time.Time // zero while running
	// killed: the node crashed while it ran; end is the crash.
	killed bool
	failed bool // the job returned an error
	// refused: the fenced store refused the attempt's write (its fence
	// was below the latest the store had accepted for its schedule).
	refused bool
}

func (a *attempt) String() string {
	end := "running"
	if !a.end.IsZero() {
		end = a.end.Format("15:04:05.000")
		if a.killed {
			end += " (crash)"
		}
	}
	return fmt.Sprintf("%s@%s on %s/%d fence %d attempt %d run %.8s: %s..%s", a.sched,
		a.tick.UTC().Format("15:04:05"), a.node, a.life, a.fence, a.attempt, a.runID,
		a.start.Format("15:04:05.000"), end)
}

type ledger struct {
	mu   sync.Mutex
	atts []*attempt
	// fenced is the fenced resource the jobs write to (fencedStore).
	fenced fencedStore
}

// fencedStore is what a job's fencing token protects: a resource that
// remembers, per schedule, the highest fence it accepted a write with and
// refuses a write with a lower one (a stale holder's). Each locked attempt
// writes to it once, at its end; a job can thus check its fence against
// the latest fence the resource saw. Guarded by ledger.mu.
type fencedStore struct {
	latest map[string]int64
}

// write reports whether the store accepts a write of sched with fence.
func (f *fencedStore) write(sched string, fence int64) bool {
	if f.latest == nil {
		f.latest = map[string]int64{}
	}
	if fence < f.latest[sched] {
		return false
	}
	f.latest[sched] = fence
	return true
}

func (l *ledger) all() []attempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]attempt, len(l.atts))
	for i, a := range l.atts {
		out[i] = *a
	}
	return out
}

// job is a schedule's job on one node life: it runs for a time drawn from
// the seed and the tick (on the fake clock), fails at the schedule's rate,
// ends at once when its context ends, and dies with its process.
type job struct {
	c  *cluster
	sp *schedPlan
	lf *lifeState
}

func (j *job) Run(ctx context.Context, t scheduler.Tick) error {
	c := j.c
	a := &attempt{sched: t.ScheduleID, tick: t.Time, node: t.NodeID, life: j.lf.life,
		runID: t.RunID, attempt: t.Attempt, fence: t.FencingToken, manual: t.Manual}
	c.ledger.mu.Lock()
	if j.lf.crashed {
		c.ledger.mu.Unlock()
		return errCut // a dead process starts nothing
	}
	a.start = c.clock.Now()
	c.ledger.atts = append(c.ledger.atts, a)
	c.ledger.mu.Unlock()

	key := []any{"job", t.ScheduleID, t.Time.UnixNano(), t.NodeID, t.Attempt}
	d := time.Duration(c.plan.draw(key...) * float64(j.sp.maxRun))
	fail := c.plan.chance(j.sp.failRate, append(key, "fail")...)
	timer := j.lf.clock(c).NewTimer(d) // a frozen process's job stops with it
	defer timer.Stop()
	var err error
	select {
	case <-timer.C():
		if fail {
			err = errJobFailed
		}
	case <-ctx.Done():
		err = context.Cause(ctx)
		j.outlastTerm()
	case <-j.lf.killed:
		err = errCut
	}
	c.ledger.mu.Lock()
	if j.lf.crashed {
		a.end, a.killed = j.lf.diedAt, true
	} else {
		a.end = c.clock.Now()
		if a.fence != 0 {
			a.refused = !c.ledger.fenced.write(a.sched, a.fence)
		}
	}
	a.failed = err != nil
	c.ledger.mu.Unlock()
	return err
}

var errJobFailed = fmt.Errorf("sim: job failed (drawn)")

// observer is a node life's Observer: it keeps the run records (the
// cluster's history, as the production binary stores them), its skip
// records and its runs' starts until the life crashes, and traces skips.
type observer struct {
	scheduler.NopObserver
	c  *cluster
	lf *lifeState
}

// skipKey names a tick a node life reported skipped.
type skipKey struct {
	node  string
	life  int
	sched string
	tick  int64 // Unix ns
}

// histRec is a run record and the life that wrote it.
type histRec struct {
	scheduler.RunRecord
	life int
}

// skipRec is a skip record and the life that wrote it.
type skipRec struct {
	scheduler.SkipRecord
	life int
}

// startRec is a run's start record and the life that wrote it.
type startRec struct {
	scheduler.RunStart
	life int
}

func (o *observer) RunRecorded(r scheduler.RunRecord) {
	c := o.c
	c.ledger.mu.Lock()
	defer c.ledger.mu.Unlock()
	delete(c.running, r.RunID)
	if o.lf.crashed {
		return // a crashed process writes no history
	}
	c.history = append(c.history, histRec{r, o.lf.life})
}

// SkipRecorded keeps a skip record (scheduler.SkipObserver), as history
// would, until the life crashes: invariant 8 (audit.go) reads them.
func (o *observer) SkipRecorded(r scheduler.SkipRecord) {
	c := o.c
	c.ledger.mu.Lock()
	defer c.ledger.mu.Unlock()
	if o.lf.crashed {
		return // a crashed process writes no history
	}
	c.skipRecs = append(c.skipRecs, skipRec{r, o.lf.life})
}

// RunStarted keeps a run's start (scheduler.RunStartObserver): the agent
// writes it to history at once (its provisional record), until the life
// crashes.
func (o *observer) RunStarted(r scheduler.RunStart) {
	c := o.c
	c.ledger.mu.Lock()
	defer c.ledger.mu.Unlock()
	if o.lf.crashed {
		return
	}
	c.starts = append(c.starts, startRec{r, o.lf.life})
	if c.running == nil {
		c.running = map[string]runningRun{}
	}
	c.running[r.RunID] = runningRun{o.lf, r.Schedule, r.Tick}
}

// runningRun is a run going on (cluster.running).
type runningRun struct {
	lf       *lifeState
	schedule string
	tick     time.Time
}

// replaceRuns is the cluster's side of overlap = "replace"
// (scheduler.Options.ReplaceRuns): the runs of schedule's ticks before at
// going on in a live process are stopped as replaced, as the agent's stop
// request and its node's pollStops do, at once.
func (c *cluster) replaceRuns(schedule string, at time.Time) {
	type stop struct {
		lf    *lifeState
		runID string
	}
	var stops []stop
	c.ledger.mu.Lock()
	for id, r := range c.running {
		if r.schedule == schedule && r.tick.Before(at) && !r.lf.crashed {
			stops = append(stops, stop{r.lf, id})
		}
	}
	c.ledger.mu.Unlock()
	slices.SortFunc(stops, func(a, b stop) int { return strings.Compare(a.runID, b.runID) }) // a replay stops in the same order
	for _, s := range stops {
		if s.lf.s.ReplaceRun(s.runID) {
			c.event(c.clock.Now(), "%s/%d run %s of %s replaced", s.lf.node, s.lf.life, s.runID, schedule)
		}
	}
}

func (o *observer) TickSkipped(id string, tick time.Time, why scheduler.SkipReason) {
	c := o.c
	c.ledger.mu.Lock()
	c.skips[skipKey{o.lf.node, o.lf.life, id, tick.UnixNano()}] = why
	c.ledger.mu.Unlock()
	o.c.event(o.c.clock.Now(), "%s/%d skipped %s@%s: %s", o.lf.node, o.lf.life, id, o.c.at(tick), why)
}

func (o *observer) RunFinished(id string, tick time.Time, res scheduler.RunResult, d time.Duration, overrun bool) {
	o.c.event(o.c.clock.Now(), "%s/%d ran %s@%s: %s in %v", o.lf.node, o.lf.life, id, o.c.at(tick), res, d)
}
