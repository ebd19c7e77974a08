package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
)

// The next tick of an every-second schedule under overlap = "skip" is
// free to run somewhere once the run of the previous one has returned:
// neither the deferred end of that run (pool.later) nor a release still
// on its way when the next tick fires may hold it off every node. The
// node that ran T would skip T+1 as still_running while its lock is
// held, and every other node is told contended, which raises no mark.

// twoNodes starts two schedulers of scheds on one fake clock and one
// memory lock table; wrap, when set, wraps each node's lock.
func twoNodes(t *testing.T, wrap func(id string, l *faulty) scheduler.Locker, scheds ...scheduler.Schedule) (a, b *harness) {
	t.Helper()
	clock := fakeclock.New(t0)
	mem := memory.New(memory.WithClock(clock.Now))
	node := func(id string) *harness {
		f := &faulty{inner: mem.Peer(id)}
		var l scheduler.Locker = f
		if wrap != nil {
			l = wrap(id, f)
		}
		h := newHarness(t, scheduler.Options{Clock: clock, NodeID: id, Locker: l, Backend: hints.Distributed}, scheds...)
		h.mem, h.locker = mem, f
		return h
	}
	a, b = node("node-a"), node("node-b")
	a.start()
	b.start()
	return a, b
}

// runsOf counts the runs of tick in job, and names the nodes.
func runsOf(job *countingJob, id string, tick time.Time) (n int, nodes []string) {
	for _, tk := range job.got() {
		if tk.ScheduleID == id && tk.Time.Equal(tick) {
			n++
			nodes = append(nodes, tk.NodeID)
		}
	}
	return n, nodes
}

// holdJob is a countingJob whose run of one tick waits until released.
type holdJob struct {
	countingJob
	hold    time.Time
	started chan struct{}
	release chan struct{}
}

func (j *holdJob) Run(ctx context.Context, t scheduler.Tick) error {
	_ = j.countingJob.Run(ctx, t)
	if t.Time.Equal(j.hold) {
		j.started <- struct{}{}
		<-j.release
	}
	return nil
}

// Under a burst that keeps the pool busy, the end of a run (its report and
// release) waits behind the ticks not yet started (pool.later), up to
// maxDefer. A run of an every-second schedule that ends just before T+1
// must not wait there: its lock would still be held at T+1 (minus the
// clock skew a node ahead may ask with), and T+1 would run nowhere.
func TestDeferredRunEndDoesNotHoldTheNextTick(t *testing.T) {
	t.Parallel()
	t1, t2 := t0.Add(time.Second), t0.Add(2*time.Second)
	job := &holdJob{hold: t1, started: make(chan struct{}, 1), release: make(chan struct{})}
	a, b := twoNodes(t, nil, sched("s", everySecond, hints.RequireGlobal, job))
	undo := []func(){a.s.DeferRunEnds(), b.s.DeferRunEnds()}
	for _, u := range undo {
		t.Cleanup(u) // before the harness stops (cleanups run last first)
	}

	a.clock.Advance(time.Second) // T1: one node runs it, the other is told contended
	<-job.started
	for _, h := range []*harness{a, b} {
		h.loopParked()
	}
	a.clock.Advance(950 * time.Millisecond)
	for _, h := range []*harness{a, b} {
		h.loopParked()
	}
	close(job.release) // T1's job ends at T1+0.95s

	// Its end is done at once, lock released, before the clock moves on.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, h := range []*harness{a, b} {
		if err := h.s.WaitIdle(ctx); err != nil {
			t.Errorf("T1's run returned at T1+0.95s; its end (report, release) still waits behind the burst: %v (%s)", err, h.s.IdleState())
		}
	}
	a.clock.Advance(50 * time.Millisecond) // T2
	for _, h := range []*harness{a, b} {
		h.loopParked()
	}
	for _, u := range undo {
		u()
	}
	a.idle()
	b.idle()
	if n, nodes := runsOf(&job.countingJob, "s", t2); n != 1 {
		t.Errorf("T2 ran %d times (on %v), want once", n, nodes)
	}
	if n, _ := runsOf(&job.countingJob, "s", t1); n != 1 {
		t.Errorf("T1 ran %d times, want once", n)
	}
}

// gatedRelease holds the release of a node's lock until the test opens
// its gate, as a slow backend does: the release is on its way.
type gatedRelease struct {
	*faulty
	id      string
	armed   atomic.Bool
	entered chan string
	gate    chan struct{}
}

func (g *gatedRelease) Release(ctx context.Context, h *locking.Handle) error {
	if g.armed.Load() {
		g.entered <- g.id
		<-g.gate
	}
	return g.faulty.Release(ctx, h)
}

// A release still on its way when the next tick fires on the node that
// ran the previous one: that node must not skip the tick as
// still_running (its run has returned), and the others were told
// contended (no mark raised), so it asks for the tick once its release is
// done.
func TestReleaseUnderWayDoesNotLoseTheNextTick(t *testing.T) {
	t.Parallel()
	t1, t2 := t0.Add(time.Second), t0.Add(2*time.Second)
	job := &countingJob{}
	entered, gate := make(chan string, 2), make(chan struct{})
	gates := map[string]*gatedRelease{}
	a, b := twoNodes(t, func(id string, f *faulty) scheduler.Locker {
		g := &gatedRelease{faulty: f, id: id, entered: entered, gate: gate}
		gates[id] = g
		return g
	}, sched("s", everySecond, hints.RequireGlobal, job))
	nodes := map[string]*harness{"node-a": a, "node-b": b}
	for _, g := range gates {
		g.armed.Store(true)
	}

	a.clock.Advance(time.Second) // T1: its job returns at once, its release hangs
	holder := <-entered
	other := nodes["node-a"]
	if holder == "node-a" {
		other = nodes["node-b"]
	}
	other.idle()
	nodes[holder].loopParked()

	a.clock.Advance(time.Second) // T2, while the holder's release of T1's lock is on its way
	other.idle()
	nodes[holder].loopParked()
	for _, g := range gates {
		g.armed.Store(false)
	}
	close(gate)
	a.idle()
	b.idle()
	if n, ran := runsOf(job, "s", t2); n != 1 {
		_, skips, _ := nodes[holder].rec.snapshot()
		t.Errorf("T2 ran %d times (on %v), want once; %s ran T1 and skipped %v", n, ran, holder, skips)
	}
	if n, _ := runsOf(job, "s", t1); n != 1 {
		t.Errorf("T1 ran %d times, want once", n)
	}
}
