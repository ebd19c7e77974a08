package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
)

// Overlap says what a tick does when this node still runs the previous one.
type Overlap string

// Overlap policies.
const (
	OverlapSkip Overlap = "skip" // skip the tick (reason still_running); the default
	// OverlapAllow runs it alongside. Under a lock, the lock is the
	// tick's (schedule id and tick time), not the schedule's: runs of
	// consecutive ticks may overlap across the cluster, each tick still
	// once (the tick mark rules that).
	OverlapAllow Overlap = "allow"
)

// Schedule is one schedule, as the config package builds it.
type Schedule struct {
	ID       string         // unique; also the lock key
	Spec     Spec           // when nil, CronExpr is parsed with ParseSpec
	CronExpr string         // the expression as written, for display
	Location *time.Location // for parsing CronExpr when Spec is nil; nil = UTC
	Hint     hints.Hint     // "" = hints.Default

	// ExpectedRuntime is how long a run should take (0 = 1m, the config
	// default). A longer run is an overrun: logged and reported, never killed.
	ExpectedRuntime time.Duration
	Jitter          time.Duration // a random delay in [0, Jitter) before the run
	Timeout         time.Duration // the run's deadline; 0 = none
	Overlap         Overlap       // "" = OverlapSkip
	// CatchupWindow is how late a tick may still start, once (DESIGN.md
	// "Catch-up"): 0 means the default, one period of the schedule (the
	// time from the tick to the next one); NoCatchup means never late.
	CatchupWindow time.Duration
	// Spread is the upper bound of a stable per-schedule offset added to
	// every tick (the same on every node and across restarts); 0: none.
	Spread time.Duration
	// Retries is how many times a failed run is retried within its tick,
	// under the same lock (renewed); RetryBackoff is the wait before the
	// first retry, doubling after each. 0 and 0: no retry; a backoff of 0
	// with retries means 10s.
	Retries      int
	RetryBackoff time.Duration
	// PauseAfterFailures pauses the schedule cluster-wide after that many
	// failed runs in a row (0: never).
	PauseAfterFailures int
	Job                Job
}

// NoCatchup as a Schedule's CatchupWindow never runs a late tick (the
// config's catchup_window = "0s"); ticks on time still run.
const NoCatchup time.Duration = -1

// Locker is the part of the lock contract (locking.Locker and
// locking.TickLocker) the scheduler uses. A backend that also implements
// locking.LeaseBounder (Postgres) bounds every lease by its MaxLease.
type Locker interface {
	locking.TickLocker
	Renew(ctx context.Context, h *locking.Handle) error
	Release(ctx context.Context, h *locking.Handle) error
}

// Options configures a Scheduler. Zero values mean the defaults named.
type Options struct {
	NodeID        string        // default: the host name
	Locker        Locker        // nil: no backend configured
	Backend       hints.Backend // what Locker is: None, Local (memory) or Distributed
	SafetyMargin  time.Duration // default 5s; added to every lock TTL
	MaxClockSkew  time.Duration // default 1s; the clock-skew tolerance (try-lock-tick)
	ShutdownGrace time.Duration // default 30s; how long running jobs get at stop
	Clock         Clock         // default RealClock()
	Observer      Observer      // default NopObserver
	Logger        *slog.Logger  // default: discard
	// Rand returns a number in [0, n); it draws the jitter delays.
	// Default: math/rand/v2's Int64N.
	Rand func(n int64) int64
	// Preferrer, when set, spreads locked ticks over the live nodes: a
	// node not preferred for a tick waits its turn, HandoffDelay (default
	// DefaultHandoffDelay, at most MaxClockSkew/2) per rank, before it
	// asks (prefer.go). nil: every node asks at once.
	Preferrer    Preferrer
	HandoffDelay time.Duration
	// Watcher tells a waiting node that its tick was decided elsewhere;
	// default: Locker, when it is a locking.TickWatcher.
	Watcher locking.TickWatcher
}

// Defaults of Options and Schedule.
const (
	DefaultSafetyMargin    = 5 * time.Second
	DefaultMaxClockSkew    = time.Second
	DefaultShutdownGrace   = 30 * time.Second
	DefaultExpectedRuntime = time.Minute
)

// ErrInvalid is wrapped by every error New and Reload return for a bad
// option or schedule.
var ErrInvalid = errors.New("scheduler: invalid configuration")

// ErrRunning is returned by a second call to Run.
var ErrRunning = errors.New("scheduler: Run called twice")

// LockTTL is the lease a tick's lock is taken with: the expected runtime,
// plus the jitter spent holding it before the run, plus a safety margin
// (DESIGN step 3). `next` prints this value. (skew is kept for callers:
// the tick mark, not the lock, now covers the clock skew.)
func LockTTL(expected, jitter, margin, skew time.Duration) time.Duration {
	return expected + jitter + margin
}

// Scheduler fires schedules and runs their ticks. Create it with New,
// start it with Run; Reload and Snapshot are safe to call at any time,
// from any goroutine.
type Scheduler struct {
	opts  Options // defaults filled in
	clock Clock
	obs   Observer
	log   *slog.Logger
	// Resolved once at New, so a tick pays nothing to find them.
	clockObs  ClockObserver    // obs, when it wants clock offsets
	runObs    RunObserver      // obs, when it keeps run records
	startObs  RunStartObserver // obs, when it wants run starts
	maxLease  time.Duration    // the backend's LeaseBounder bound; 0: the TTL
	bootClock func() time.Time // the lease clock (lease.go); nil: clock.Now
	backend   backendState     // outage and recovery (catchup.go)
	hand      *handoff         // nil: no handoff (prefer.go)

	mu       sync.Mutex
	states   map[string]*schedState // by ID; also removed ones still busy
	heap     eventHeap
	started  bool // Run was called
	stopping bool // Run's context ended: no new fires
	inflight int  // tick tasks not finished
	parked   bool // the loop waits on its timer with nothing due
	// wakeAt is when the parked loop's timer comes due (Unix ns).
	wakeAt int64
	// wakePending: the loop was poked and has not yet taken the wake.
	wakePending bool
	idle        chan struct{}

	wake chan struct{}  // tells the loop the heap's head changed
	wg   sync.WaitGroup // tick tasks not finished
	work *pool          // the workers that carry them (pool.go)
	// watches keeps stopped run watches (run.go) for reuse.
	watches sync.Pool
	// batch sends try-lock-ticks together (batch.go); nil: one by one.
	batch *batcher
	// rel sends releases together (release.go); nil: one by one.
	rel *releaser

	// Set by Run before the loop starts.
	stopCh chan struct{}   // closed when shutdown begins: abandon ticks not started
	jobCtx context.Context // parent of job contexts: cancelled after the grace
	// runParents stand between jobCtx and the runs' contexts. A context
	// keeps its children in a map under its own mutex, so thousands of
	// runs starting and ending at once on one parent queued on that
	// mutex; runs take these in turn instead (runParent).
	runParents [16]struct {
		ctx    context.Context
		cancel context.CancelFunc
	}
	nextParent atomic.Uint32
	cancelJobs context.CancelCauseFunc
	// endGrace is closed by EndGrace: the shutdown cancels jobs at once.
	endGrace     chan struct{}
	endGraceOnce sync.Once
}

// compiled is a validated Schedule with what the scheduler derives from it
// once. Reload swaps a state's compiled pointer; a tick in flight keeps the
// one it fired with.
type compiled struct {
	Schedule
	lock bool          // the hint resolved to "take the lock"
	ttl  time.Duration // the lease of its lock
}

// schedState is the scheduler's memory of one schedule ID.
type schedState struct {
	id      string
	def     *compiled
	fire    event     // the next tick in the heap (index -1 when not)
	next    time.Time // fire.at as a time, in the spec's location
	active  int       // ticks of it in flight on this node
	removed bool      // gone from the set; kept while active
	// decided is the latest tick of it this node has seen decided by the
	// backend (granted, done, paused, missed): the floor it passes with
	// try-lock-tick, so a backend that lost its marks cannot make a tick
	// this node saw decided run again.
	decided time.Time
	// owed: a tick of it failed on the backend; the catch-up tries its
	// latest tick when the backend answers again (catchup.go).
	owed bool
	// lastSuccess is the tick of the last successful run this node knows.
	lastSuccess time.Time
	last        lastOutcome
}

type lastOutcome struct {
	tick     time.Time
	skip     SkipReason
	result   RunResult
	runStart time.Time
	runDur   time.Duration
}

// ScheduleState is one schedule's state, as Snapshot reports it.
type ScheduleState struct {
	ID              string
	Next            time.Time  // the next tick; zero before Run or when it never fires
	LastTick        time.Time  // the last fired tick; zero before the first
	LastSkip        SkipReason // why LastTick was skipped; "" when it ran
	LastResult      RunResult  // how the last run ended; "" before the first
	LastRunStart    time.Time
	LastRunDuration time.Duration
	Running         int // ticks in flight on this node
}

// New checks the options and schedules and returns a Scheduler ready to
// Run. It reports every problem at once (errors.Join), each wrapping
// ErrInvalid and naming the schedule; require_global without a backend is
// one of them (it wraps hints.ErrNoBackend too).
func New(opts Options, schedules []Schedule) (*Scheduler, error) {
	opts, optErr := withDefaults(opts)
	s := &Scheduler{
		opts:   opts,
		clock:  opts.Clock,
		obs:    opts.Observer,
		log:    opts.Logger,
		states: make(map[string]*schedState, len(schedules)),
		wake:   make(chan struct{}, 1),
	}
	s.backend.poke = make(chan struct{}, 1)
	s.endGrace = make(chan struct{})
	s.work = newPool(s.runTask)
	s.clockObs, _ = opts.Observer.(ClockObserver)
	s.runObs, _ = opts.Observer.(RunObserver)
	s.startObs, _ = opts.Observer.(RunStartObserver)
	if lb, ok := opts.Locker.(locking.LeaseBounder); ok {
		s.maxLease = lb.MaxLease()
	}
	s.bootClock = bootClockOf(opts.Clock)
	s.batch = newBatcher(opts.Locker)
	s.rel = newReleaser(opts.Locker)
	s.initHandoff()
	defs, err := s.compile(schedules)
	if err := errors.Join(optErr, err); err != nil {
		return nil, err
	}
	for _, c := range defs {
		st := &schedState{id: c.ID, def: c}
		st.fire = event{kind: eventFire, index: -1, st: st}
		s.states[c.ID] = st
	}
	s.markLater(defs)
	return s, nil
}

func withDefaults(o Options) (Options, error) {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...)))
	}
	if o.NodeID == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "node"
		}
		o.NodeID = h
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"SafetyMargin", &o.SafetyMargin, DefaultSafetyMargin},
		{"MaxClockSkew", &o.MaxClockSkew, DefaultMaxClockSkew},
		{"ShutdownGrace", &o.ShutdownGrace, DefaultShutdownGrace},
		{"HandoffDelay", &o.HandoffDelay, 0}, // initHandoff fills it, from MaxClockSkew
	} {
		switch {
		case *d.v < 0:
			bad("option %s is negative (%v)", d.name, *d.v)
		case *d.v == 0:
			*d.v = d.def
		}
	}
	switch {
	case o.Backend < hints.None || o.Backend > hints.Distributed:
		bad("option Backend has unknown value %d", o.Backend)
	case o.Locker == nil && o.Backend != hints.None:
		bad("option Backend says a lock backend is configured but Locker is nil")
	case o.Locker != nil && o.Backend == hints.None:
		bad("option Locker is set but Backend is None (say Local or Distributed)")
	}
	if o.Clock == nil {
		o.Clock = RealClock()
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Rand == nil {
		o.Rand = rand.Int64N
	}
	return o, errors.Join(errs...)
}

// compile validates a schedule set and resolves what can be resolved once.
// Warnings (require_global on the memory backend) are logged, one line per
// kind of warning, however many schedules it concerns.
func (s *Scheduler) compile(schedules []Schedule) ([]*compiled, error) {
	var errs []error
	warned := map[string][]string{}
	seen := make(map[string]bool, len(schedules))
	now := s.clock.Now()
	out := make([]*compiled, 0, len(schedules))
	for i, sc := range schedules {
		name := fmt.Sprintf("schedule %q", sc.ID)
		if sc.ID == "" {
			name = fmt.Sprintf("schedule #%d", i+1)
		}
		bad := func(err error) { errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalid, name, err)) }
		nerr := len(errs)
		if err := locking.CheckKey(sc.ID); err != nil {
			bad(fmt.Errorf("id is not a valid lock key: %w", err))
		} else if seen[sc.ID] {
			bad(errors.New("duplicate id"))
		}
		seen[sc.ID] = true
		if sc.Spec == nil {
			sp, err := ParseSpec(sc.CronExpr, sc.Location)
			if err != nil {
				bad(err)
			}
			sc.Spec = sp
		}
		sc.Spec = ApplySpread(sc.Spec, sc.ID, sc.Spread) // a no-op when the spec carries its offset
		if sc.Spec != nil && sc.Spec.Next(now).IsZero() {
			bad(fmt.Errorf("cron expression %q never fires", sc.CronExpr))
		}
		if sc.Job == nil {
			bad(errors.New("no job"))
		}
		switch sc.Overlap {
		case "":
			sc.Overlap = OverlapSkip
		case OverlapSkip, OverlapAllow:
		default:
			bad(fmt.Errorf("overlap %q is neither %q nor %q", sc.Overlap, OverlapSkip, OverlapAllow))
		}
		for _, d := range []struct {
			name string
			v    time.Duration
		}{{"expected_runtime", sc.ExpectedRuntime}, {"jitter", sc.Jitter}, {"timeout", sc.Timeout}} {
			if d.v < 0 {
				bad(fmt.Errorf("%s is negative (%v)", d.name, d.v))
			}
		}
		if sc.ExpectedRuntime == 0 {
			sc.ExpectedRuntime = DefaultExpectedRuntime
		}
		if sc.Hint == "" {
			sc.Hint = hints.Default
		}
		res, err := hints.Resolve(sc.Hint, s.opts.Backend)
		if err != nil {
			bad(err)
		} else if res.Warning != "" {
			warned[res.Warning] = append(warned[res.Warning], sc.ID)
		}
		if len(errs) > nerr {
			continue
		}
		ttl := LockTTL(sc.ExpectedRuntime, sc.Jitter, s.opts.SafetyMargin, s.opts.MaxClockSkew)
		out = append(out, &compiled{Schedule: sc, lock: res.Lock, ttl: ttl})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for w, ids := range warned {
		sample := ids[:min(len(ids), 5)]
		s.log.Warn(w, slog.Int("schedules", len(ids)), slog.String("ids", strings.Join(sample, ",")))
	}
	return out, nil
}

// Reload replaces the schedule set: schedules are matched by ID; new ones
// start firing, removed ones stop, changed ones fire by their new spec from
// now on. Nothing in flight is dropped: a running tick of a removed or
// changed schedule finishes under the definition it fired with, and locks
// it holds (running or lingering) are kept and released as usual. An
// invalid set is refused whole (the error lists every problem) and the old
// set keeps running.
func (s *Scheduler) Reload(schedules []Schedule) error {
	defs, err := s.compile(schedules)
	if err != nil {
		return err
	}
	var notes []nextNote
	var added []*compiled
	s.mu.Lock()
	now := s.clock.Now()
	keep := make(map[string]bool, len(defs))
	for _, c := range defs {
		keep[c.ID] = true
		st := s.states[c.ID]
		if st == nil {
			st = &schedState{id: c.ID}
			st.fire = event{kind: eventFire, index: -1, st: st}
			s.states[c.ID] = st
		}
		same := st.def != nil && !st.removed && sameTiming(st.def, c) && st.fire.index >= 0
		if st.def == nil || st.removed {
			added = append(added, c)
		}
		st.def, st.removed = c, false
		// An unchanged schedule keeps its next tick: rescheduled from now,
		// a tick due but not yet popped by the loop would be lost.
		if s.started && !s.stopping && !same {
			notes = append(notes, s.scheduleLocked(st, now))
		}
	}
	for id, st := range s.states {
		if keep[id] || st.removed {
			continue
		}
		st.removed = true
		if st.fire.index >= 0 {
			s.heap.remove(&st.fire)
		}
		st.next = time.Time{}
		notes = append(notes, nextNote{id, time.Time{}})
		s.forgetIfDoneLocked(st)
	}
	s.pokeLocked()
	s.mu.Unlock()
	for _, n := range notes {
		s.obs.NextTick(n.id, n.next)
	}
	if len(added) > 0 {
		s.markLater(added)
		select {
		case s.backend.poke <- struct{}{}:
		default:
		}
	}
	return nil
}

// sameTiming reports whether two definitions of a schedule fire at the
// same times, so Reload can keep its next tick.
func sameTiming(a, b *compiled) bool {
	if a.CronExpr == "" || a.CronExpr != b.CronExpr || a.Spread != b.Spread {
		return false
	}
	return a.Location.String() == b.Location.String()
}

// Snapshot returns every schedule's state, sorted by ID.
func (s *Scheduler) Snapshot() []ScheduleState {
	s.mu.Lock()
	out := make([]ScheduleState, 0, len(s.states))
	for _, st := range s.states {
		if st.removed {
			continue
		}
		out = append(out, ScheduleState{
			ID: st.id, Next: st.next, Running: st.active,
			LastTick: st.last.tick, LastSkip: st.last.skip, LastResult: st.last.result,
			LastRunStart: st.last.runStart, LastRunDuration: st.last.runDur,
		})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b ScheduleState) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// forgetIfDoneLocked drops a removed schedule's state once nothing of it
// is in flight.
func (s *Scheduler) forgetIfDoneLocked(st *schedState) {
	if st.removed && st.active == 0 && s.states[st.id] == st {
		delete(s.states, st.id)
	}
}
