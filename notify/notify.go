// Package notify tells someone outside the cluster how runs go (DESIGN.md
// "Operating it", bullet "Telling someone"):
//
//   - a dead-man's switch per schedule (ping_url), speaking the
//     healthchecks.io protocol: /start when a run starts, the bare URL on
//     success, /fail (or /<exit status>) on failure, each with the run id
//     as rid, so the monitor pairs start and end;
//   - a webhook ([notify] url, or a schedule's own notify_url) that gets
//     one JSON POST per event [notify] events chooses: per failure streak
//     the first failed run, then the recovery; a schedule paused after too
//     many failures; a run that overran its expected_runtime or finished
//     under its min_runtime; a tick missed (past its catch-up window); a
//     tick the audit found lost (internal/agent tells, once per tick).
//
// It sees only the runs and skips of the node it lives on
// (scheduler.RunStartObserver, RunObserver and Observer's TickSkipped), so
// the node that ran or skipped a tick is the only one that tells of it
// (a tick missed cluster-wide is answered missed to one node: the backend
// raises the tick mark over it). Everything is sent off the tick's path: the observer methods put
// a message on its destination's bounded queue and return; the
// destination's workers deliver it with a timeout and a few retries; a
// full queue drops the message, counts it and logs once per streak. A
// monitor that hangs or fails never delays or fails a run, and delays and
// drops only its own host's pings (queue.go).
//
// Secrets: ping and webhook URLs carry theirs in the path, so they are
// only ever shown as scheme://host[:port] (internal/redact), and the error
// line a notification carries is masked and cut to one line.
package notify

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Defaults of Options.
const (
	// DefaultTimeout bounds one attempt of one delivery; the contract's
	// ceiling for pings is 5 s.
	DefaultTimeout = 5 * time.Second
	// DefaultRetries is how many times a failed delivery is tried again.
	DefaultRetries = 2
	// DefaultBackoff is the wait before the first retry; it doubles.
	DefaultBackoff = time.Second
	// DefaultQueue is how many messages may wait for one destination.
	DefaultQueue = 1024
	// DefaultWorkers is how many pings to one host are delivered at once.
	DefaultWorkers = 4
	// DefaultDestinations is how many destinations are delivered to at
	// once: a bound on the workers when many hosts are slow at once.
	DefaultDestinations = 16
)

// History is what the notifier needs of the cluster's run history to know
// whether a run starts or ends a failure streak cluster-wide: the
// schedule's newest runs, newest first. cluster.Store has it.
type History interface {
	Runs(ctx context.Context, schedule string, limit int) ([]cluster.Run, error)
}

// Options configure a Notifier.
type Options struct {
	NodeID string
	// URL is [notify] url: where events are POSTed; "" sends none but to
	// the schedules that have a notify_url.
	URL string
	// Events are the events POSTed (EventFailure, ...); nil: DefaultEvents.
	Events []string
	// Pings maps a schedule id to its ping_url; schedules not in it are
	// not pinged. SetPings replaces it (a reload).
	Pings map[string]string
	// Schedules holds the per-schedule settings of the webhook events:
	// notify_url, min_runtime and expected_runtime. SetSchedules replaces it
	// (a reload).
	Schedules map[string]Schedule
	// History, when set, tells whether the previous run of a schedule, on
	// any node, failed. Without it (no backend keeps history) a streak is
	// this node's own runs.
	History History
	// Mask removes secrets (values the config expanded from ${VAR}) from
	// an error line before it is sent. nil: identity. URLs in the line are
	// always shown as scheme://host[:port].
	Mask func(string) string

	Timeout time.Duration // per attempt; default DefaultTimeout
	Retries int           // default DefaultRetries; -1 for none
	Backoff time.Duration // default DefaultBackoff
	Queue   int           // per destination; default DefaultQueue
	Workers int           // per ping host; default DefaultWorkers
	// Destinations is how many destinations have workers at once; default
	// DefaultDestinations. While more have messages, they take turns.
	Destinations int

	// OnDrop, when set, is told the kind of every dropped message ("ping"
	// or "notification"): serve counts them in bext_notify_dropped_total.
	// It must not block.
	OnDrop func(kind string)

	// Client sends every request; default a client of its own that never
	// follows a redirect (a redirect must not carry a body elsewhere).
	Client *http.Client
	Logger *slog.Logger
}

// Schedule is what the webhook events need of one schedule.
type Schedule struct {
	// NotifyURL, when set, receives the schedule's events instead of
	// Options.URL.
	NotifyURL string
	// MinRuntime: a success faster than it is a too_fast event; 0: none.
	MinRuntime time.Duration
	// ExpectedRuntime is what an overrun event says the run ran over
	// (the scheduler judges the overrun: RunRecord.Overrun).
	ExpectedRuntime time.Duration
}

// Notifier delivers pings and notifications. Create with New, start with
// Run; its methods are safe for concurrent use and never block.
type Notifier struct {
	opts   Options
	log    *slog.Logger
	events map[string]bool // the events sent

	mu      sync.Mutex
	urls    map[string]string    // schedule → ping_url
	scheds  map[string]Schedule  // schedule → its notify_url, min_runtime
	started map[string]startPing // run id → its start ping
	last    map[string]runState  // schedule → this node's last finished run

	// The destinations and their workers (queue.go), under mu.
	dests    map[string]*destination // by key; an idle one without a drop streak is forgotten
	waiting  []*destination          // for a slot, oldest first
	active   int                     // destinations holding a slot
	workers  int                     // running workers, all destinations
	base     context.Context         // what deliveries run on; nil until Run
	stopping bool                    // Run's ctx is done: it waits for the workers
	finished bool                    // no worker is left after stopping; no more start
	drained  chan struct{}           // closed when finished

	dropped atomic.Int64
}

// startPing is a run's start ping, for its result ping to wait for.
type startPing struct {
	raw  string        // the ping_url it went to
	done chan struct{} // closed once it was delivered or given up
}

// runState is what the streak decision needs of a run.
type runState struct {
	start  time.Time
	failed bool
}

var (
	_ scheduler.RunObserver      = (*Notifier)(nil)
	_ scheduler.RunStartObserver = (*Notifier)(nil)
)

// New returns a notifier; nothing is sent until Run.
func New(opts Options) *Notifier {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	switch {
	case opts.Retries < 0:
		opts.Retries = 0
	case opts.Retries == 0:
		opts.Retries = DefaultRetries
	}
	if opts.Backoff <= 0 {
		opts.Backoff = DefaultBackoff
	}
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Destinations <= 0 {
		opts.Destinations = DefaultDestinations
	}
	if opts.Mask == nil {
		opts.Mask = func(s string) string { return s }
	}
	if opts.Client == nil {
		opts.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Events == nil {
		opts.Events = DefaultEvents
	}
	n := &Notifier{
		opts:    opts,
		events:  map[string]bool{},
		log:     opts.Logger,
		started: map[string]startPing{},
		last:    map[string]runState{},
		dests:   map[string]*destination{},
		drained: make(chan struct{}),
	}
	for _, e := range opts.Events {
		n.events[e] = true
	}
	n.SetPings(opts.Pings)
	n.SetSchedules(opts.Schedules)
	return n
}

// Sends says whether event is among the events sent.
func (n *Notifier) Sends(event string) bool { return n.events[event] }

// SetSchedules replaces the schedules' notify_url and min_runtime (at
// start and on reload).
func (n *Notifier) SetSchedules(s map[string]Schedule) {
	scheds := make(map[string]Schedule, len(s))
	for id, sc := range s {
		if sc != (Schedule{}) {
			scheds[id] = sc
		}
	}
	n.mu.Lock()
	n.scheds = scheds
	n.mu.Unlock()
}

// hook returns where schedule's events go ("" for nowhere) and its
// settings.
func (n *Notifier) hook(schedule string) (string, Schedule) {
	n.mu.Lock()
	sc := n.scheds[schedule]
	n.mu.Unlock()
	if sc.NotifyURL != "" {
		return sc.NotifyURL, sc
	}
	return n.opts.URL, sc
}

// SetPings replaces the schedules' ping URLs (at start and on reload).
func (n *Notifier) SetPings(pings map[string]string) {
	urls := make(map[string]string, len(pings))
	for id, u := range pings {
		if u != "" {
			urls[id] = u
		}
	}
	n.mu.Lock()
	n.urls = urls
	n.mu.Unlock()
}

// Dropped is how many messages were dropped: their destination's queue
// was full, or shutdown's grace ran out before their turn.
func (n *Notifier) Dropped() int64 { return n.dropped.Load() }

// Run delivers messages until ctx ends, then goes on delivering what is
// in flight or already queued for at most one more timeout: the result
// pings of the runs that ended during shutdown still go out, but shutdown
// is not held up by a monitor that hangs. What is still queued then is
// dropped. Call Run once.
func (n *Notifier) Run(ctx context.Context) {
	// Deliveries run on base, which outlives ctx by one timeout.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	n.mu.Lock()
	n.base = base
	for _, d := range n.dests { // what was queued before Run
		n.serveLocked(d)
	}
	n.mu.Unlock()
	<-ctx.Done()
	grace := time.AfterFunc(n.opts.Timeout, cancelBase)
	defer grace.Stop()
	n.mu.Lock()
	n.stopping = true
	if n.workers == 0 && !n.finished {
		n.finished = true
		close(n.drained)
	}
	n.mu.Unlock()
	<-n.drained
}

// RunStarted queues the run's /start ping (scheduler.RunStartObserver).
func (n *Notifier) RunStarted(r scheduler.RunStart) {
	n.mu.Lock()
	raw := n.urls[r.Schedule]
	var done chan struct{}
	if raw != "" {
		done = make(chan struct{})
		n.started[r.RunID] = startPing{raw: raw, done: done}
	}
	n.mu.Unlock()
	if raw == "" {
		return
	}
	n.enqueue(&message{kind: kindPing, schedule: r.Schedule, url: pingURL(raw, "start", r.RunID), raw: raw,
		done: done, traceparent: r.TraceParent})
}

// RunRecorded queues the run's result ping and its streak decision
// (scheduler.RunObserver).
func (n *Notifier) RunRecorded(r scheduler.RunRecord) {
	n.mu.Lock()
	raw := n.urls[r.Schedule]
	start := n.started[r.RunID]
	delete(n.started, r.RunID)
	n.mu.Unlock()
	if raw != "" {
		if suffix, ok := resultSuffix(r.Result, r.Err); ok {
			// A start sent to another URL (a reload changed it) went to
			// another monitor, maybe another destination: nothing to wait for.
			var after chan struct{}
			if start.raw == raw {
				after = start.done
			}
			n.enqueue(&message{kind: kindPing, schedule: r.Schedule, url: pingURL(raw, suffix, r.RunID), raw: raw,
				body: n.errorLine(r.Err), after: after, traceparent: r.TraceParent})
		}
	}
	hook, sc := n.hook(r.Schedule)
	if hook == "" || r.Result == scheduler.ResultCancelled || r.Result == scheduler.ResultReplaced || r.Result == scheduler.ResultNotRun {
		return
	}
	if n.events[EventFailure] || n.events[EventRecovery] {
		n.enqueue(&message{kind: kindDecide, schedule: r.Schedule, url: hook, raw: hook, run: r})
	}
	anomaly := func(kind string, limit time.Duration) {
		n.post1(hook, &Event{Event: kind, Schedule: r.Schedule, Tick: fmtTick(r.Tick), Node: r.Node,
			Result: string(r.Result), Attempts: r.Attempts, RunID: r.RunID,
			DurationSeconds: r.Duration.Seconds(), LimitSeconds: limit.Seconds()})
	}
	// The same judgements as the anomaly metrics (metrics.RunRecorded).
	if r.Overrun && n.events[EventOverrun] {
		anomaly(EventOverrun, sc.ExpectedRuntime)
	}
	if r.Result == scheduler.ResultSuccess && sc.MinRuntime > 0 && r.Duration < sc.MinRuntime && n.events[EventTooFast] {
		anomaly(EventTooFast, sc.MinRuntime)
	}
}

// TickSkipped queues a missed event for a tick this node skipped as
// missed (scheduler.Observer, through the node's observer).
func (n *Notifier) TickSkipped(schedule string, tick time.Time, reason scheduler.SkipReason) {
	if reason != scheduler.SkipMissed || !n.events[EventMissed] {
		return
	}
	if hook, _ := n.hook(schedule); hook != "" {
		n.post1(hook, &Event{Event: EventMissed, Schedule: schedule, Tick: fmtTick(tick), Node: n.opts.NodeID})
	}
}

// Lost queues a lost event for tick of schedule, which the audit this
// node runs found lost; the caller tells each lost tick once.
func (n *Notifier) Lost(schedule string, tick time.Time) {
	if !n.events[EventLost] {
		return
	}
	if hook, _ := n.hook(schedule); hook != "" {
		n.post1(hook, &Event{Event: EventLost, Schedule: schedule, Tick: fmtTick(tick), Node: n.opts.NodeID})
	}
}

// Paused queues a notification that schedule was paused cluster-wide,
// with the pause's note (pause_after_failures calls it on the node that
// paused).
func (n *Notifier) Paused(schedule, note string) {
	if !n.events[EventPaused] {
		return
	}
	if hook, _ := n.hook(schedule); hook != "" {
		n.post1(hook, &Event{Event: EventPaused, Schedule: schedule, Node: n.opts.NodeID, Note: n.errorLine(stringError(note))})
	}
}

// post1 queues one webhook POST of ev to hook.
func (n *Notifier) post1(hook string, ev *Event) {
	n.enqueue(&message{kind: kindPost, schedule: ev.Schedule, url: hook, raw: hook, event: ev})
}

type stringError string

func (e stringError) Error() string { return string(e) }
