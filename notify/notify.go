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
// a message on a bounded queue and return; workers deliver it with a
// timeout and a few retries; a full queue drops the message, counts it and
// logs. A monitor that hangs or fails never delays or fails a run.
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
	// DefaultQueue is how many messages may wait for delivery.
	DefaultQueue = 1024
	// DefaultWorkers is how many pings are delivered at once.
	DefaultWorkers = 4
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
	Queue   int           // default DefaultQueue
	Workers int           // ping workers; default DefaultWorkers

	// Client sends every request; default a client of its own that never
	// follows a redirect (a redirect must not carry a body elsewhere).
	Client *http.Client
	Logger *slog.Logger
	// Now is the clock of the drop-log rate limit; default time.Now.
	Now func() time.Time
}

// Notifier delivers pings and notifications. Create with New, start with
// Run; its methods are safe for concurrent use and never block.
type Notifier struct {
	opts Options
	log  *slog.Logger

	pings    chan *message // pings, delivered by Workers goroutines
	webhooks chan *message // streak decisions and notifications, in order, by one

	mu      sync.Mutex
	urls    map[string]string        // schedule → ping_url
	started map[string]chan struct{} // run id → closed when its start ping is done
	last    map[string]runState      // schedule → this node's last finished run

	dropped     atomic.Int64
	lastDropLog time.Time // under mu
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
	if opts.Now == nil {
		opts.Now = time.Now
	}
	n := &Notifier{
		opts:     opts,
		log:      opts.Logger,
		pings:    make(chan *message, opts.Queue),
		webhooks: make(chan *message, opts.Queue),
		started:  map[string]chan struct{}{},
		last:     map[string]runState{},
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

// Dropped is how many messages were dropped because the queue was full.
func (n *Notifier) Dropped() int64 { return n.dropped.Load() }

// Run delivers messages until ctx ends, then goes on delivering what is
// in flight or already queued for at most one more timeout: the result
// pings of the runs that ended during shutdown still go out, but shutdown
// is not held up by a monitor that hangs.
func (n *Notifier) Run(ctx context.Context) {
	// Deliveries run on base, which outlives ctx by one timeout.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(n.opts.Timeout, cancelBase) })
	defer stop()
	var wg sync.WaitGroup
	deliver := func(q chan *message) {
		defer wg.Done()
		for {
			select {
			case m := <-q:
				n.deliver(base, m)
				continue
			case <-ctx.Done():
			}
			for {
				select {
				case m := <-q:
					n.deliver(base, m)
				default:
					return
				}
			}
		}
	}
	wg.Add(n.opts.Workers + 1)
	for range n.opts.Workers {
		go deliver(n.pings)
	}
	go deliver(n.webhooks)
	wg.Wait()
}

// RunStarted queues the run's /start ping (scheduler.RunStartObserver).
func (n *Notifier) RunStarted(r scheduler.RunStart) {
	n.mu.Lock()
	raw := n.urls[r.Schedule]
	var done chan struct{}
	if raw != "" {
		done = make(chan struct{})
		n.started[r.RunID] = done
	}
	n.mu.Unlock()
	if raw == "" {
		return
	}
	n.enqueue(n.pings, &message{kind: kindPing, schedule: r.Schedule, url: pingURL(raw, "start", r.RunID), raw: raw,
		done: done})
}

// RunRecorded queues the run's result ping and its streak decision
// (scheduler.RunObserver).
func (n *Notifier) RunRecorded(r scheduler.RunRecord) {
	n.mu.Lock()
	raw := n.urls[r.Schedule]
	startDone := n.started[r.RunID]
	delete(n.started, r.RunID)
	n.mu.Unlock()
	if raw != "" {
		if suffix, ok := resultSuffix(r.Result, r.Err); ok {
			n.enqueue(n.pings, &message{kind: kindPing, schedule: r.Schedule, url: pingURL(raw, suffix, r.RunID), raw: raw,
				body: n.errorLine(r.Err), after: startDone})
		}
	}
	if n.opts.URL != "" && r.Result != scheduler.ResultCancelled && r.Result != scheduler.ResultNotRun {
		n.enqueue(n.webhooks, &message{kind: kindDecide, schedule: r.Schedule, url: n.opts.URL, raw: n.opts.URL, run: r})
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
	n.enqueue(n.webhooks, &message{kind: kindPost, schedule: schedule, url: n.opts.URL, raw: n.opts.URL, event: &ev})
}

// enqueue puts m on q, or drops it when q is full.
func (n *Notifier) enqueue(q chan *message, m *message) {
	select {
	case q <- m:
		return
	default:
	}
	if m.done != nil {
		close(m.done) // the result ping must not wait for a start never sent
	}
	total := n.dropped.Add(1)
	now := n.opts.Now()
	n.mu.Lock()
	logIt := n.lastDropLog.IsZero() || now.Sub(n.lastDropLog) >= time.Minute
	if logIt {
		n.lastDropLog = now
	}
	n.mu.Unlock()
	if logIt {
		n.log.Warn("notification dropped: its queue is full (the monitor or webhook is slow or down)",
			slog.String("schedule", m.schedule), slog.String("kind", m.kind.String()), slog.Int64("dropped_total", total))
	}
}

type stringError string

func (e stringError) Error() string { return string(e) }
