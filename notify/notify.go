// Package notify tells someone outside the cluster how runs go (DESIGN.md
// "Operating it", bullet "Telling someone"):
//
//   - a dead-man's switch per schedule (ping_url), speaking the
//     healthchecks.io protocol: /start when a run starts, the bare URL on
//     success, /fail (or /<exit status>) on failure, each with the run id
//     as rid, so the monitor pairs start and end;
//   - a webhook ([notify] url) that gets one JSON POST per failure streak:
//     the first failed run, then the recovery; and one when a schedule is
//     paused after too many failures.
//
// It sees only the runs of the node it lives on (scheduler.RunStartObserver
// and RunObserver), so the node that ran a tick is the only one that pings
// for it. Everything is sent off the tick's path: the observer methods put
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
	// URL is [notify] url: where streak notifications are POSTed; "" sends
	// none.
	URL string
	// Pings maps a schedule id to its ping_url; schedules not in it are
	// not pinged. SetPings replaces it (a reload).
	Pings map[string]string
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

// Notifier delivers pings and notifications. Create with New, start with
// Run; its methods are safe for concurrent use and never block.
type Notifier struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	urls    map[string]string    // schedule → ping_url
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
	n := &Notifier{
		opts:    opts,
		log:     opts.Logger,
		started: map[string]startPing{},
		last:    map[string]runState{},
		dests:   map[string]*destination{},
		drained: make(chan struct{}),
	}
	n.SetPings(opts.Pings)
	return n
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
	if n.opts.URL != "" && r.Result != scheduler.ResultCancelled && r.Result != scheduler.ResultNotRun {
		n.enqueue(&message{kind: kindDecide, schedule: r.Schedule, url: n.opts.URL, raw: n.opts.URL, run: r})
	}
}

// Paused queues a notification that schedule was paused cluster-wide,
// with the pause's note (pause_after_failures calls it on the node that
// paused).
func (n *Notifier) Paused(schedule, note string) {
	if n.opts.URL == "" {
		return
	}
	ev := Event{Event: EventPaused, Schedule: schedule, Node: n.opts.NodeID, Note: n.errorLine(stringError(note))}
	n.enqueue(&message{kind: kindPost, schedule: schedule, url: n.opts.URL, raw: n.opts.URL, event: &ev})
}

type stringError string

func (e stringError) Error() string { return string(e) }
