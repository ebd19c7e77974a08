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
	// OverlapAllow runs it alongside. Under a lock the running tick holds
	// the schedule's key, so the new one is skipped as contended: overlap
	// really happens only for node-local runs.
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
	Job    Job
}

// NoCatchup as a Schedule's CatchupWindow never runs a late tick (the
// config's catchup_window = "0s"); ticks on time still run.
const NoCatchup time.Duration = -1

// Locker is the part of the lock contract (locking.Locker) the scheduler
// uses.
type Locker interface {
	TryLock(ctx context.Context, key string, ttl time.Duration) (*locking.Handle, error)
	Renew(ctx context.Context, h *locking.Handle) error
	Release(ctx context.Context, h *locking.Handle) error
}

// Options configures a Scheduler. Zero values mean the defaults named.
type Options struct {
	NodeID        string        // default: the host name
	Locker        Locker        // nil: no backend configured
	Backend       hints.Backend // what Locker is: None, Local (memory) or Distributed
	SafetyMargin  time.Duration // default 5s; added to every lock TTL
	MaxClockSkew  time.Duration // default 1s; the clock-skew tolerance (claim.go)
	ShutdownGrace time.Duration // default 30s; how long running jobs get at stop
	Clock         Clock         // default RealClock()
	Observer      Observer      // default NopObserver
	Logger        *slog.Logger  // default: discard
	// Rand returns a number in [0, n); it draws the jitter delays.
	// Default: math/rand/v2's Int64N.
	Rand func(n int64) int64
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
// (DESIGN step 3), raised to at least 2*skew + margin so the clock-skew
// claim (claim.go) never outlives the lease. `next` prints this value.
func LockTTL(expected, jitter, margin, skew time.Duration) time.Duration {
	return max(expected+jitter+margin, 2*skew+margin)
}

// Scheduler fires schedules and runs their ticks. Create it with New,
// start it with Run; Reload and Snapshot are safe to call at any time,
// from any goroutine.
type Scheduler struct {
	opts Options // defaults filled in
	// claimer is opts.Locker when its locks die with their holder and the
	// tick's claim must be recorded (claim.go); nil otherwise, resolved
	// once so other backends pay nothing per tick.
	claimer locking.Claimer
	clock   Clock
	obs     Observer
	log     *slog.Logger

	mu       sync.Mutex
	states   map[string]*schedState // by ID; also removed ones still busy
	heap     eventHeap
	started  bool // Run was called
	stopping bool // Run's context ended: no new fires, no new claims
	inflight int  // tick and release tasks not finished
	parked   bool // the loop waits on its timer with nothing due
	// wakePending: the loop was poked and has not yet taken the wake.
	wakePending bool
	idle        chan struct{}

	wake chan struct{}  // tells the loop the heap's head changed
	wg   sync.WaitGroup // tick and release tasks not finished
	work *pool          // the workers that carry them (pool.go)
	// watches keeps stopped run watches (run.go) for reuse.
	watches sync.Pool

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
	cancelJobs context.CancelFunc
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
	claim   *claim    // the lingering lock of its last tick, if any
	removed bool      // gone from the set; kept while active or claimed
	last    lastOutcome
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
	s.work = newPool(s.runTask)
	s.claimer, _ = opts.Locker.(locking.Claimer)
	defs, err := s.compile(schedules)
	if err := errors.Join(optErr, err); err != nil {
		return nil, err
	}
	for _, c := range defs {
		st := &schedState{id: c.ID, def: c}
		st.fire = event{kind: eventFire, index: -1, st: st}
		s.states[c.ID] = st
	}
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
		st.def, st.removed = c, false
		if s.started && !s.stopping {
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
	return nil
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
// is in flight or claimed.
func (s *Scheduler) forgetIfDoneLocked(st *schedState) {
	if st.removed && st.active == 0 && st.claim == nil && s.states[st.id] == st {
		delete(s.states, st.id)
	}
}
