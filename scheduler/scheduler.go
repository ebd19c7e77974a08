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
	"sync"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/internal/workpool"
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
	// OverlapQueue keeps one tick waiting for the running run (on any
	// node) and starts it as soon as the schedule's lock is free, within
	// the tick's catch-up window; a further tick while one waits on this
	// node is skipped (still_running). The lock is the schedule's, as
	// under skip (queue.go).
	OverlapQueue Overlap = "queue"
	// OverlapReplace is queue, but the waiting tick first stops the run in
	// progress (recorded replaced): here at once, on another node through
	// Options.ReplaceRuns (the cluster's stop requests).
	OverlapReplace Overlap = "replace"
)

// Schedule is one schedule, as the config package builds it.
type Schedule struct {
	ID       string         // unique; also the lock key
	Spec     cronspec.Spec  // when nil, CronExpr is parsed with cronspec.Parse
	CronExpr string         // the expression as written, for display
	Location *time.Location // for parsing CronExpr when Spec is nil; nil = UTC
	Hint     hints.Hint     // "" = hints.Default

	// ExpectedRuntime is how long a run should take (0 = 1m, the config
	// default). A longer run is an overrun: logged and reported, never killed.
	ExpectedRuntime time.Duration
	// MinRuntime: a successful run faster than it is an anomaly, too_fast
	// (0: none). Reported with the run, never acted on.
	MinRuntime time.Duration
	Jitter     time.Duration // a random delay in [0, Jitter) before the run
	Timeout    time.Duration // the run's deadline; 0 = none
	Overlap    Overlap       // "" = OverlapSkip
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
	// Group names the schedule's concurrency group: at most GroupMax runs
	// of the group's schedules run at once in the cluster, each holding a
	// slot of the group's counting lease (locking.TryLockSlot) besides its
	// lock. A tick that finds no slot free is skipped (SkipGroupFull), or
	// with GroupWait waits for one within its catch-up window, holding its
	// lock. "": no group.
	Group     string
	GroupMax  int
	GroupWait bool
	// Nodes targets the schedule (the config's nodes): only a node whose
	// Options.Tags hold every one of these asks for its ticks, takes its
	// manual runs and catches it up. nil: every node.
	Nodes []string
	Job   Job
}

// Matches reports whether a node with tags may run a schedule targeted
// at nodes: it holds every one of them (exact strings, "role=db"). No
// nodes: every node matches.
func Matches(nodes, tags []string) bool {
	for _, n := range nodes {
		if !slices.Contains(tags, n) {
			return false
		}
	}
	return true
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
	NodeID string // default: the host name
	// Tags are this node's tags; a schedule with Nodes runs here only
	// when they hold all of its (Matches).
	Tags []string
	// ReplaceRuns, when set, is called by a tick of an overlap = "replace"
	// schedule each time it finds the schedule's lock held (its tick at):
	// it asks the cluster to stop the runs of the schedule's earlier ticks
	// on other nodes (internal/agent, through the cluster's stop requests;
	// a node that receives one calls ReplaceRun). It must not block.
	ReplaceRuns   func(schedule string, at time.Time)
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
	// asks (handoff.go). nil: every node asks at once.
	Preferrer    Preferrer
	HandoffDelay time.Duration
	// Watcher tells a waiting node that its tick was decided elsewhere;
	// default: Locker, when it is a locking.TickWatcher.
	Watcher locking.TickWatcher
	// NetClock times the waits between resends of an undecided
	// try-lock-tick (resend.go): they wait for the network, not for the
	// schedule, so they keep to the machine's clock (the default,
	// RealClock) also when Clock is a test's. A simulation whose whole
	// cluster runs on one fake clock (internal/sim) sets it to that clock
	// so that a seed's resends come when the seed says.
	NetClock Clock
	// History, when set, tells a run's job the cluster's last success
	// (Tick.LastSuccessTime, BEXT_LAST_SUCCESS_TICK_TIME) rather than
	// only the last this node saw: nil, this node's own.
	History History
	// Tracer, when set, traces every run and the backend decision that
	// granted it (trace.go); nil: no tracing, at the cost of a nil check.
	Tracer RunTracer
}

// History is the cluster's run history as a run's start reads it.
type History interface {
	// LastSuccess returns the tick of the schedule's newest successful
	// run in the history (ok false: none there).
	LastSuccess(ctx context.Context, schedule string) (tick time.Time, ok bool, err error)
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
	clockObs   ClockObserver    // obs, when it wants clock offsets
	runObs     RunObserver      // obs, when it keeps run records
	startObs   RunStartObserver // obs, when it wants run starts
	attemptObs AttemptObserver  // obs, when it wants retries' starts
	skipObs    SkipObserver     // obs, when it keeps skip records
	tracer     RunTracer        // opts.Tracer; nil: runs are not traced
	maxLease   time.Duration    // the backend's LeaseBounder bound; 0: the TTL
	bootClock  func() time.Time // the lease clock (lease.go); nil: clock.Now
	backend    backendState     // outage and recovery (catchup.go)
	hand       *handoff         // nil: no handoff (handoff.go)
	// idleWanted: some WaitIdle or WaitSettled (tests) has waited since
	// the last notifyLocked; a handoff waiter notifies only then.
	idleWanted atomic.Bool

	// cfgMu orders Reload, Add and Remove: only they change which
	// schedules are live and their definitions, so Reload can compare
	// the set it was given with the live one in steps, without holding mu
	// throughout. gen, nlive and policies are theirs.
	cfgMu    sync.Mutex
	gen      uint32                // Reloads so far
	policies map[policyKey]*policy // the distinct policies compiled
	mu       sync.Mutex
	states   map[string]*schedState // by ID; also removed ones still busy
	nlive    int                    // states not removed
	// order is every live state (and some removed ones), in the order of
	// the set last given to New or Reload, then those Add added: where
	// Reload looks for a schedule first (reload.go). cfgMu's.
	order    []*schedState
	heap     eventHeap
	started  bool // Run was called
	stopping bool // Run's context ended: no new fires
	inflight int  // ticks not ended
	parked   bool // the loop waits on its timer with nothing due
	// wakeAt is when the parked loop's timer comes due (Unix ns).
	wakeAt int64
	// wakePending: the loop was poked and has not yet taken the wake.
	wakePending bool
	idle        chan struct{}

	wake chan struct{}         // tells the loop the heap's head changed
	wg   sync.WaitGroup        // ticks not ended
	work *workpool.Pool[*tick] // the workers that carry them (internal/workpool)
	// fired is dispatch's buffer, kept between wakes (the loop's only).
	fired []*tick
	// watches keeps stopped run watches (run.go) for reuse.
	watches sync.Pool
	// batch sends try-lock-ticks together (batch.go, internal/batch); nil: one by one.
	batch *tickBatcher
	// rel sends releases together (release.go); nil: one by one.
	rel *releaser

	// Set by Run before the loop starts.
	stopCh chan struct{}   // closed when shutdown begins: abandon ticks not started
	jobCtx context.Context // parent of job contexts: cancelled after the grace
	// runBase is the parent of the runs' contexts: jobCtx's values, never
	// cancelled; the end of the grace cancels the runs through runs.
	runBase context.Context
	runs    runSet
	// stops and backoffs serve StopRun (stop.go).
	stops    stops
	backoffs backoffs
	// relCtx bounds releases (loop.go releaseCtx).
	relCtx     atomic.Pointer[sharedDeadline]
	cancelJobs context.CancelCauseFunc
	// endGrace is closed by EndGrace: the shutdown cancels jobs at once.
	endGrace     chan struct{}
	endGraceOnce sync.Once
}

// compiled is a validated Schedule with what the scheduler derives from it
// once. Reload swaps a state's compiled pointer; a tick in flight keeps the
// one it fired with. What schedules usually have in common (the hint, the
// durations, the lock's TTL) sits in a policy they share: a fleet of
// 100,000 schedules has a handful of distinct ones, and each compiled
// stays a few words.
type compiled struct {
	ID       string
	CronExpr string        // shared with every schedule of the same expression
	Spec     cronspec.Spec // parsed, spread applied
	Job      Job
	*policy
	// loc is the zone CronExpr was parsed in when the Schedule had no
	// Spec (nil when it had one): with the same expression and zone, a
	// Reload knows the spec is the same without parsing or looking it up.
	loc *time.Location
}

// policy is the shared, immutable part of a compiled schedule: the
// schedule's options with their defaults filled in, and what they resolve
// to under the scheduler's options.
type policy struct {
	policyKey
	lock bool          // the hint resolved to "take the lock"
	ttl  time.Duration // the lease of its lock
}

// policyKey is a Schedule's options, defaults filled in; it decides the
// rest of its policy (the scheduler's options are fixed at New).
type policyKey struct {
	Hint               hints.Hint
	ExpectedRuntime    time.Duration
	MinRuntime         time.Duration
	Jitter             time.Duration
	Timeout            time.Duration
	Overlap            Overlap
	CatchupWindow      time.Duration
	Spread             time.Duration
	Retries            int
	RetryBackoff       time.Duration
	PauseAfterFailures int
	// Targeted: the schedule has Nodes. Its ticks skip the handoff (the
	// preferred node may be one its nodes exclude, which never asks).
	// Elsewhere: this node's tags do not match them, so it never fires
	// the schedule, catches it up or runs it by hand.
	Targeted, Elsewhere bool
	Group               string
	GroupMax            int
	GroupWait           bool
}

// schedState is the scheduler's memory of one schedule ID. Fields are
// ordered so the small ones share a word: there is one per schedule.
type schedState struct {
	id  string
	def *compiled
	// fire is the next tick in the heap (index -1 when it has none): at is
	// the tick, read as a time in the spec's location by next.
	fire event
	// decided is the latest tick of it this node has seen decided by the
	// backend (granted, done, paused, missed): the floor it passes with
	// try-lock-tick, so a backend that lost its marks cannot make a tick
	// this node saw decided run again.
	decided tickTime
	// lastSuccess is the tick of the last successful run this node knows.
	lastSuccess tickTime
	last        lastOutcome
	active      int32  // ticks of it in flight on this node
	gen         uint32 // the last Reload that named it (reload.go)
	removed     bool   // gone from the set; kept while active
	// owed: a tick of it failed on the backend; the catch-up tries its
	// latest tick when the backend answers again (catchup.go).
	owed bool
	// waiting: a tick of it fired while each of its runs here had
	// returned and was giving its lock back; it is asked for once they
	// have (release.go).
	waiting bool
	// queueWoken: a run of it ended here while its waiting tick (queue)
	// had no timer armed, because it was trying or had not parked yet;
	// park then arms its next try at once, not a queueRetry later.
	queueWoken bool
	// queue is its tick that waits for the run in progress (overlap =
	// "queue", queue.go): at most one per schedule on a node. Under s.mu.
	queue *tick
	// releasing counts its runs whose job returned and whose lock is not
	// given back yet (release.go).
	releasing atomic.Int32
	// markAhead: this node logged that the schedule's tick mark lies
	// ahead of the backend's clock (lockAnswer); cleared by a grant, so a
	// later incident is logged again.
	markAhead atomic.Bool
}

// lastOutcome is kept for every schedule, so it is kept small: times in
// Unix nanoseconds (0: none) and the reasons as indexes into their lists
// (a node of 100,000 schedules held 56 bytes more per schedule as times
// and strings).
type lastOutcome struct {
	tick, runStart int64
	runDur         time.Duration
	skip           uint8 // index in skipReasons; 0: ran
	result         uint8 // index in runResults; 0: none yet
}

// skipReasons and runResults are what lastOutcome's indexes name; the
// first of each is the "none".
var (
	skipReasons = [...]SkipReason{"", SkipContended, SkipBackendError, SkipStillRunning, SkipPaused, SkipMissed, SkipGroupFull}
	runResults  = [...]RunResult{"", ResultSuccess, ResultFailure, ResultTimeout, ResultLockLost, ResultCancelled, ResultReplaced}
)

// indexOf is v's index in list; a value not in it (none is made) is kept as
// the "none" of index 0 rather than as another.
func indexOf[V comparable](list []V, v V) uint8 {
	for i, w := range list {
		if w == v {
			return uint8(i)
		}
	}
	return 0
}

// unixOrZero is the Unix nanoseconds of t, 0 for the zero Time.
func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// timeOrZero reads Unix nanoseconds n (0: none) in loc.
func timeOrZero(n int64, loc *time.Location) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).In(loc)
}

// next is st's next tick, in loc (the zone of the scheduler's clock, as
// every tick is given: Spec.Next keeps its argument's zone, and the
// catch-up's ticks are read from the clock too); zero when it has none.
func (st *schedState) next(loc *time.Location) time.Time {
	if st.fire.index < 0 {
		return time.Time{}
	}
	return time.Unix(0, st.fire.at).In(loc)
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
		opts:     opts,
		clock:    opts.Clock,
		obs:      opts.Observer,
		log:      opts.Logger,
		states:   make(map[string]*schedState, len(schedules)),
		policies: map[policyKey]*policy{},
		wake:     make(chan struct{}, 1),
	}
	s.backend.poke = make(chan struct{}, 1)
	s.endGrace = make(chan struct{})
	var pc workpool.Clock
	if bootClockOf(s.clock) == nil {
		pc = poolClock{s.clock} // an injected clock (see pool.clock)
	}
	s.work = workpool.New(s.runTask, s.jobReturned, pc)
	s.clockObs, _ = opts.Observer.(ClockObserver)
	s.runObs, _ = opts.Observer.(RunObserver)
	s.startObs, _ = opts.Observer.(RunStartObserver)
	s.attemptObs, _ = opts.Observer.(AttemptObserver)
	s.skipObs, _ = opts.Observer.(SkipObserver)
	s.tracer = opts.Tracer
	if lb, ok := opts.Locker.(locking.LeaseBounder); ok {
		s.maxLease = lb.MaxLease()
	}
	s.bootClock = bootClockOf(opts.Clock)
	s.batch = newBatcher(opts.Locker, s.deliverAnswers, s.sendingRequests)
	s.rel = newReleaser(opts.Locker, s.released)
	s.initHandoff(len(schedules))
	defs, err := s.compile(schedules)
	if err := errors.Join(optErr, err); err != nil {
		return nil, err
	}
	s.order = make([]*schedState, len(defs))
	for i, c := range defs {
		s.order[i] = newState(c)
		s.states[c.ID] = s.order[i]
	}
	s.nlive = len(defs)
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
	if o.NetClock == nil {
		o.NetClock = RealClock()
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

// Snapshot returns every schedule's state, sorted by ID.
func (s *Scheduler) Snapshot() []ScheduleState {
	loc := s.clock.Now().Location() // every time is given in the clock's zone
	s.mu.Lock()
	out := make([]ScheduleState, 0, len(s.states))
	for _, st := range s.states {
		if st.removed {
			continue
		}
		out = append(out, ScheduleState{
			ID: st.id, Next: st.next(loc), Running: int(st.active),
			LastTick: timeOrZero(st.last.tick, loc), LastSkip: skipReasons[st.last.skip],
			LastResult: runResults[st.last.result], LastRunStart: timeOrZero(st.last.runStart, loc),
			LastRunDuration: st.last.runDur,
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

// tickTime is a tick time that only ever moves forward, read and raised
// without s.mu: a tick reads and raises its schedule's decided floor and
// last success on its own goroutine, and with thousands of ticks in
// flight, taking the scheduler's mutex for each of them (four times a
// tick) was where a burst's workers queued. It keeps the instant in Unix
// nanoseconds (0: none), so ticks must lie within 1678-2262, as every
// cron tick does; the location is the reader's (see load).
type tickTime struct{ ns atomic.Int64 }

// load returns the time in loc (the zero Time when none was raised).
func (t *tickTime) load(loc *time.Location) time.Time {
	n := t.ns.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).In(loc)
}

// raise moves the time to tick if tick is later.
func (t *tickTime) raise(tick time.Time) {
	n := tick.UnixNano()
	for {
		cur := t.ns.Load()
		if cur != 0 && n <= cur {
			return
		}
		if t.ns.CompareAndSwap(cur, n) {
			return
		}
	}
}

// atOrAfter reports whether the time is at or after tick (false when
// none was raised).
func (t *tickTime) atOrAfter(tick time.Time) bool {
	n := t.ns.Load()
	return n != 0 && tick.UnixNano() <= n
}

// poolClock is the scheduler's injected clock as the pool takes it.
type poolClock struct{ c Clock }

func (p poolClock) Now() time.Time { return p.c.Now() }

func (p poolClock) AfterFunc(d time.Duration, f func()) workpool.Timer { return p.c.AfterFunc(d, f) }
