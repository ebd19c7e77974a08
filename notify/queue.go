package notify

import (
	"context"
	"log/slog"

	"github.com/bext-dev/bext-scheduler/internal/redact"
)

// A destination is where messages wait and are delivered from: one per
// ping host (scheme://host[:port]) and one per webhook host ([notify] url,
// the schedules' notify_url). Each has its
// own bounded queue and its own workers, so a host that hangs or crawls
// holds up and drops only its own messages.
//
// Per host rather than per URL: a host is what hangs (its DNS, its TCP, its
// server), and a host that hangs fails every check it serves alike. Keyed
// by URL, one hung host with a hundred checks would be a hundred
// destinations taking a hundred workers' slots, starving the healthy hosts
// of the bounded Destinations; keyed by host it takes one. The key is also
// what logs may show (a URL carries its secret). The cost: checks of one
// host share its queue and its Workers.
type destination struct {
	key  string // lane and name: the index of Notifier.dests
	name string // scheme://host[:port], as logs show it
	kind string // what its drops are counted as: "ping" or "notification"
	// limit is how many of its messages are delivered at once; the
	// notification lane's one keeps streak decisions in run order.
	limit int

	// Under Notifier.mu.
	queue   []*message // waiting, oldest first; at most Options.Queue
	workers int        // its running workers
	active  bool       // holds one of the Destinations slots
	waiting bool       // in Notifier.waiting, for a slot
	yield   bool       // another destination waits: leave after the deliveries in flight
	streak  int64      // drops since it last delivered; 0: not dropping
}

// route is the destination a message goes to: its key, name and kind.
func (n *Notifier) route(m *message) (key, name, kind string) {
	kind = m.kind.String()
	name = redact.URL(m.raw)
	return kind + " " + name, name, kind
}

// enqueue puts m on its destination's queue, starting a worker when the
// destination may have one more, or drops m when the queue is full. It
// never blocks.
func (n *Notifier) enqueue(m *message) {
	key, name, kind := n.route(m)
	n.mu.Lock()
	d := n.dests[key]
	if d == nil {
		d = &destination{key: key, name: name, kind: kind, limit: n.opts.Workers}
		if m.kind != kindPing {
			d.limit = 1
		}
		n.dests[key] = d
	}
	if len(d.queue) >= n.opts.Queue {
		d.streak++
		first := d.streak == 1
		n.mu.Unlock()
		n.drop(d, m, first)
		return
	}
	d.queue = append(d.queue, m)
	n.serveLocked(d)
	n.mu.Unlock()
}

// serveLocked gives d the workers its queue needs: one more while it holds
// a slot and is under its limit, or a slot when one is free, or a place
// among the destinations waiting for one (then every destination holding a
// slot yields it after its deliveries in flight, so slots go round). Only
// while Run runs.
func (n *Notifier) serveLocked(d *destination) {
	if n.base == nil || n.finished || len(d.queue) == 0 {
		return
	}
	switch {
	case d.active:
		if !d.yield && d.workers < d.limit {
			n.spawnLocked(d)
		}
	case !d.waiting:
		d.waiting = true
		n.waiting = append(n.waiting, d)
		n.grantLocked()
	}
}

// grantLocked gives free slots to the waiting destinations, oldest first;
// if some still wait, those holding a slot are told to yield it.
func (n *Notifier) grantLocked() {
	for len(n.waiting) > 0 && n.active < n.opts.Destinations {
		d := n.waiting[0]
		n.waiting[0] = nil
		n.waiting = n.waiting[1:]
		d.waiting = false
		if len(d.queue) == 0 {
			continue
		}
		d.active = true
		n.active++
		for d.workers < min(d.limit, len(d.queue)) {
			n.spawnLocked(d)
		}
	}
	if len(n.waiting) > 0 {
		for _, d := range n.dests {
			if d.active {
				d.yield = true
			}
		}
	}
}

func (n *Notifier) spawnLocked(d *destination) {
	d.workers++
	n.workers++
	go n.work(d, n.base)
}

// work delivers d's messages on base until d's queue is empty or d yields
// its slot: an idle destination has no goroutine. A worker delivers one
// message before it yields, so destinations taking turns make progress.
func (n *Notifier) work(d *destination, base context.Context) {
	for first := true; ; first = false {
		m := n.take(d, base, first)
		if m == nil {
			return
		}
		if n.deliver(base, m) {
			n.delivered(d)
		}
	}
}

// take returns d's next message, or nil when this worker is to exit: the
// queue is empty, or d yields and this is not the worker's first message.
// The last worker of d gives its slot to the next waiting destination,
// puts d back in line when messages remain, and forgets d when it is idle
// and not in a drop streak. Once shutdown's grace is over (base done),
// what waits is dropped, not tried.
func (n *Notifier) take(d *destination, base context.Context, first bool) *message {
	n.mu.Lock()
	defer n.mu.Unlock()
	if base.Err() != nil && len(d.queue) > 0 {
		stale := d.queue
		d.queue = nil
		logDrop := d.streak == 0
		d.streak += int64(len(stale))
		n.mu.Unlock() // drop calls OnDrop and logs
		for i, m := range stale {
			n.drop(d, m, logDrop && i == 0)
		}
		n.mu.Lock()
	}
	if len(d.queue) > 0 && (first || !d.yield) {
		m := d.queue[0]
		d.queue[0] = nil
		d.queue = d.queue[1:]
		return m
	}
	n.leaveLocked(d)
	return nil
}

// leaveLocked ends one worker of d.
func (n *Notifier) leaveLocked(d *destination) {
	d.workers--
	n.workers--
	if d.workers == 0 {
		d.active, d.yield = false, false
		n.active--
		switch {
		case len(d.queue) > 0:
			d.waiting = true
			n.waiting = append(n.waiting, d)
		case d.streak == 0:
			delete(n.dests, d.key)
		}
		n.grantLocked()
	}
	if n.stopping && n.workers == 0 && !n.finished {
		n.finished = true
		close(n.drained)
	}
}

// drop counts m as dropped, lets a result ping waiting for m go, and logs
// when m starts d's drop streak.
func (n *Notifier) drop(d *destination, m *message, first bool) {
	if m.done != nil {
		close(m.done) // the result ping must not wait for a start never sent
	}
	total := n.dropped.Add(1)
	if n.opts.OnDrop != nil {
		n.opts.OnDrop(d.kind)
	}
	if first {
		n.log.Warn("notification dropped: its destination's queue is full (the monitor or webhook is slow or down); "+
			"no more of these until it delivers again",
			slog.String("destination", d.name), slog.String("kind", d.kind), slog.String("schedule", m.schedule),
			slog.Int64("dropped_total", total))
	}
}

// delivered ends d's drop streak, if any, with one log line.
func (n *Notifier) delivered(d *destination) {
	n.mu.Lock()
	dropped := d.streak
	d.streak = 0
	n.mu.Unlock()
	if dropped > 0 {
		n.log.Info("notifications delivered again", slog.String("destination", d.name), slog.String("kind", d.kind),
			slog.Int64("dropped", dropped))
	}
}
