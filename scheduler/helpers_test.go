package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if side := os.Getenv(idleChildEnv); side != "" {
		os.Exit(idleChild(side)) // BenchmarkVsRobfigIdle's child process
	}
	goleak.VerifyTestMain(m)
}

// t0 is where every fake clock starts: a whole minute, so "every second"
// and "every minute" schedules have a tick exactly one step away.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// waitTimeout bounds every wait of a test; it is a deadline for a broken
// test, never a delay a passing test spends.
const waitTimeout = 20 * time.Second

// cond lets a test wait for a condition that another goroutine makes true.
type cond struct {
	mu sync.Mutex
	ch chan struct{}
}

func (c *cond) broadcast() {
	c.mu.Lock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
	c.mu.Unlock()
}

// wait blocks until ok() is true (ok runs under no lock of c's).
func (c *cond) wait(t testing.TB, what string, ok func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for {
		c.mu.Lock()
		if c.ch == nil {
			c.ch = make(chan struct{})
		}
		ch := c.ch
		c.mu.Unlock()
		if ok() {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// recorder is an Observer that keeps everything it is told.
type recorder struct {
	cond
	mu      sync.Mutex
	fired   []firedEv
	skipped []skipEv
	runs    []runEv
	next    map[string]time.Time
}

type firedEv struct {
	id       string
	tick     time.Time
	lateness time.Duration
}

type skipEv struct {
	id     string
	tick   time.Time
	reason scheduler.SkipReason
}

type runEv struct {
	id      string
	tick    time.Time
	result  scheduler.RunResult
	d       time.Duration
	overrun bool
}

func newRecorder() *recorder { return &recorder{next: map[string]time.Time{}} }

func (r *recorder) TickFired(id string, tick time.Time, l time.Duration) {
	r.mu.Lock()
	r.fired = append(r.fired, firedEv{id, tick, l})
	r.mu.Unlock()
	r.broadcast()
}

func (r *recorder) TickSkipped(id string, tick time.Time, why scheduler.SkipReason) {
	r.mu.Lock()
	r.skipped = append(r.skipped, skipEv{id, tick, why})
	r.mu.Unlock()
	r.broadcast()
}

func (r *recorder) RunFinished(id string, tick time.Time, res scheduler.RunResult, d time.Duration, overrun bool) {
	r.mu.Lock()
	r.runs = append(r.runs, runEv{id, tick, res, d, overrun})
	r.mu.Unlock()
	r.broadcast()
}

func (r *recorder) NextTick(id string, next time.Time) {
	r.mu.Lock()
	r.next[id] = next
	r.mu.Unlock()
	r.broadcast()
}

func (r *recorder) snapshot() (fired []firedEv, skipped []skipEv, runs []runEv) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]firedEv(nil), r.fired...), append([]skipEv(nil), r.skipped...), append([]runEv(nil), r.runs...)
}

// waitRuns waits until n runs finished and returns them.
func (r *recorder) waitRuns(t testing.TB, n int) []runEv {
	t.Helper()
	r.wait(t, "runs", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.runs) >= n })
	_, _, runs := r.snapshot()
	return runs
}

// waitSkips waits until n skips were reported and returns them.
func (r *recorder) waitSkips(t testing.TB, n int) []skipEv {
	t.Helper()
	r.wait(t, "skips", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.skipped) >= n })
	_, skips, _ := r.snapshot()
	return skips
}

// logRec is a slog.Handler that keeps every record, for asserting what an
// operator would read.
type logRec struct {
	cond
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRec) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRec) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRec) WithGroup(string) slog.Handler            { return l }
func (l *logRec) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r.Clone())
	l.mu.Unlock()
	l.broadcast()
	return nil
}

// count returns how many records have message msg at level.
func (l *logRec) count(level slog.Level, msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.Level == level && r.Message == msg {
			n++
		}
	}
	return n
}

// attr returns the first record with msg's attribute key, as a string.
func (l *logRec) attr(msg, key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r.Message != msg {
			continue
		}
		var v string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v = a.Value.String()
				return false
			}
			return true
		})
		return v
	}
	return ""
}

func (l *logRec) waitFor(t testing.TB, level slog.Level, msg string) {
	t.Helper()
	l.wait(t, "log "+msg, func() bool { return l.count(level, msg) > 0 })
}

// faulty wraps a real Locker to inject faults: try-lock-tick errors, a
// hook run inside it (a slow backend), and a lock lost under a holder.
type faulty struct {
	cond
	inner scheduler.Locker

	mu     sync.Mutex
	tryErr error  // TryLockTick returns it instead of asking inner
	onTry  func() // runs inside TryLockTick, before inner answers
	// afterTry runs inside TryLockTick once inner has answered, before
	// the answer is returned.
	afterTry func()
	// deaf: TryLockTick answers whatever its context says meanwhile, as a
	// request already on the wire does.
	deaf     bool
	loseNext bool                            // the next Renew finds its lock released under it
	renewErr func(ctx context.Context) error // when set, Renew returns its answer instead
	tries    int
	renews   int
	releases int
	reqs     []locking.TickRequest
	// plainTries counts TryLock calls (group slots).
	plainTries int
}

func (f *faulty) TryLockTick(ctx context.Context, req locking.TickRequest) (locking.TickAnswer, error) {
	f.mu.Lock()
	f.tries++
	f.reqs = append(f.reqs, req)
	err, hook, deaf, after := f.tryErr, f.onTry, f.deaf, f.afterTry
	f.mu.Unlock()
	defer f.broadcast()
	if hook != nil {
		hook()
	}
	if err != nil {
		return locking.TickAnswer{}, err
	}
	if deaf {
		ctx = context.WithoutCancel(ctx)
	}
	ans, err := f.inner.TryLockTick(ctx, req)
	if after != nil {
		after()
	}
	return ans, err
}

func (f *faulty) InitMarks(ctx context.Context, keys []string) error {
	f.mu.Lock()
	err := f.tryErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.inner.InitMarks(ctx, keys)
}

// GetPause forwards to the inner Locker's pause flags (every backend has them).
func (f *faulty) GetPause(ctx context.Context, key string) (locking.Pause, error) {
	return f.inner.(locking.Pauser).GetPause(ctx, key)
}

// SetPause forwards to the inner Locker.
func (f *faulty) SetPause(ctx context.Context, key string, p locking.Pause) error {
	return f.inner.(locking.Pauser).SetPause(ctx, key, p)
}

func (f *faulty) setTryErr(err error) {
	f.mu.Lock()
	f.tryErr = err
	f.mu.Unlock()
}

func (f *faulty) Renew(ctx context.Context, h *locking.Handle) error {
	f.mu.Lock()
	f.renews++
	lose := f.loseNext
	f.loseNext = false
	hook := f.renewErr
	f.mu.Unlock()
	defer f.broadcast()
	if hook != nil {
		return hook(ctx)
	}
	if lose { // really lose it: the backend forgets the lock, then we ask
		if err := f.inner.Release(ctx, h); err != nil {
			return err
		}
	}
	return f.inner.Renew(ctx, h)
}

func (f *faulty) Release(ctx context.Context, h *locking.Handle) error {
	f.mu.Lock()
	f.releases++
	f.mu.Unlock()
	defer f.broadcast()
	return f.inner.Release(ctx, h)
}

func (f *faulty) counts() (tries, renews, releases int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tries, f.renews, f.releases
}

var errBackendDown = errors.New("test: backend down")

// harness is one scheduler on a fake clock with a memory lock backend
// shared with a peer (another "node") the test can lock with.
type harness struct {
	t      *testing.T
	clock  *fakeclock.Clock
	mem    *memory.Locker
	peer   *memory.Locker // another node on the same lock table
	locker *faulty
	rec    *recorder
	logs   *logRec
	s      *scheduler.Scheduler
	cancel context.CancelFunc
	done   chan error
}

// newHarness builds a scheduler for scheds; opts' Clock, Locker, Backend,
// Observer and Logger are filled in unless set. Call start to run it.
func newHarness(t *testing.T, opts scheduler.Options, scheds ...scheduler.Schedule) *harness {
	t.Helper()
	h := &harness{t: t, clock: fakeclock.New(t0), rec: newRecorder(), logs: &logRec{}}
	if fc, ok := opts.Clock.(*fakeclock.Clock); ok {
		h.clock = fc // a second node on a test's clock: step moves that clock
	}
	h.mem = memory.New(memory.WithClock(h.clock.Now), memory.WithHolder("node-a"))
	h.peer = h.mem.Peer("node-b")
	h.locker = &faulty{inner: h.mem}
	if opts.Clock == nil {
		opts.Clock = h.clock
	}
	if opts.Locker == nil && opts.Backend == hints.None {
		opts.Locker, opts.Backend = h.locker, hints.Distributed
	}
	if opts.NodeID == "" {
		opts.NodeID = "node-a"
	}
	if opts.Observer == nil {
		opts.Observer = h.rec
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(h.logs)
	}
	s, err := scheduler.New(opts, scheds)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.s = s
	return h
}

// start runs the scheduler until the test ends (or stop) and waits until
// it has armed its timer.
func (h *harness) start() *harness {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.s.Run(ctx) }()
	h.t.Cleanup(func() { h.stop() })
	h.idle()
	return h
}

// stop cancels Run and waits for it to return (idempotent). A stopping
// scheduler keeps its tick claims until their time is up, so the clock is
// moved on while it waits.
func (h *harness) stop() {
	h.t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	finished := make(chan struct{})
	var err error
	go func() {
		err = <-h.done
		close(finished)
	}()
	drain(h.t, h.clock, finished)
	if err != nil {
		h.t.Errorf("Run: %v", err)
	}
}

// drain waits until finished is closed, advancing clock a second at a time
// whenever a timer is armed: stopping schedulers wait on the fake clock for
// their claims to run out.
func drain(t testing.TB, clock *fakeclock.Clock, finished <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	go func() { // BlockUntilArmed below returns once finished
		select {
		case <-finished:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-finished:
			return
		default:
		}
		if err := clock.BlockUntilArmed(ctx, 1); err != nil {
			select {
			case <-finished:
				return
			default:
				t.Fatal("Run did not return after its context was cancelled")
			}
		}
		clock.Advance(time.Second)
	}
}

// idle waits until the scheduler handled everything due and is quiet.
func (h *harness) idle() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.s.WaitIdle(ctx); err != nil {
		h.t.Fatalf("scheduler never became idle: %v", err)
	}
}

// loopParked waits until the firing loop has re-armed its timer after
// its last wake, while ticks may still run (idle would wait for them).
// A test moves the clock past the next fire only after it: moved while the
// loop re-arms from the time it just read, the timer would fire late.
func (h *harness) loopParked() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.s.WaitLoopParked(ctx); err != nil {
		h.t.Fatalf("the loop never parked: %v (%s)", err, h.s.IdleState())
	}
}

// step advances the clock by d and waits until the scheduler is idle.
func (h *harness) step(d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	h.idle()
}

// heldBy reports who holds key in the shared lock table ("" when free).
func (h *harness) heldBy(key string) string {
	h.t.Helper()
	infos, err := h.mem.List(context.Background())
	if err != nil {
		h.t.Fatalf("List: %v", err)
	}
	for _, i := range infos {
		if i.Key == key {
			return i.Holder
		}
	}
	return ""
}

// blockingJob is a job that tells when it started and runs until released
// or its context ends.
type blockingJob struct {
	started chan scheduler.Tick
	release chan struct{}
	ended   chan error // the context's cause when it ended by ctx, else nil
}

func newBlockingJob() *blockingJob {
	return &blockingJob{started: make(chan scheduler.Tick, 16), release: make(chan struct{}), ended: make(chan error, 16)}
}

func (j *blockingJob) Run(ctx context.Context, t scheduler.Tick) error {
	j.started <- t
	select {
	case <-j.release:
		j.ended <- nil
		return nil
	case <-ctx.Done():
		j.ended <- context.Cause(ctx)
		return ctx.Err()
	}
}

func (j *blockingJob) waitStarted(t testing.TB) scheduler.Tick {
	t.Helper()
	select {
	case tk := <-j.started:
		return tk
	case <-time.After(waitTimeout):
		t.Fatal("job never started")
	}
	return scheduler.Tick{}
}

func (j *blockingJob) waitEnded(t testing.TB) error {
	t.Helper()
	select {
	case err := <-j.ended:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("job never ended")
	}
	return nil
}

// countingJob records every tick it runs for.
type countingJob struct {
	mu    sync.Mutex
	ticks []scheduler.Tick
}

func (c *countingJob) Run(_ context.Context, t scheduler.Tick) error {
	c.mu.Lock()
	c.ticks = append(c.ticks, t)
	c.mu.Unlock()
	return nil
}

func (c *countingJob) got() []scheduler.Tick {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]scheduler.Tick(nil), c.ticks...)
}

// sched builds a schedule of job on expr with the test defaults.
func sched(id, expr string, hint hints.Hint, job scheduler.Job) scheduler.Schedule {
	return scheduler.Schedule{ID: id, CronExpr: expr, Hint: hint, ExpectedRuntime: time.Second, Job: job}
}

// TryLock takes a plain lock of inner (a concurrency group's slot),
// counted in plainTries.
func (f *faulty) TryLock(ctx context.Context, key string, ttl time.Duration) (*locking.Handle, error) {
	f.mu.Lock()
	f.plainTries++
	f.mu.Unlock()
	defer f.broadcast()
	return f.inner.(locking.TryLocker).TryLock(ctx, key, ttl)
}

// tryLocks counts the plain TryLock calls (slot tries) so far.
func (f *faulty) tryLocks() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.plainTries
}
