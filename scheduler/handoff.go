package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Spreading ticks over the live nodes (the handoff).
//
// Without it every node asks the backend for every locked tick: backend
// load grows with nodes × schedules, and the node whose clock runs fastest
// wins nearly every tick. With it each tick has one preferred node among
// the live nodes, by rendezvous (highest-random-weight) hashing
// (internal/rendezvous, the agent's Preferrer) on the
// schedule id and the tick time over the node registry: every node that
// knows the same live nodes computes the same order, and a node joining or
// leaving moves only the ticks it wins or won. The preferred node asks at
// once; the others wait a short handoff delay and then ask, unless they
// heard meanwhile (locking.TickWatcher) that the tick's mark was raised.
// Nothing here decides a tick: try-lock-tick and its mark still do, so a
// preferred node that is dead, frozen or slow costs the tick at most the
// delay, two nodes that disagree on the registry both ask at once (as
// before), and no tick runs twice.
//
// The waits are ranked: the node of rank k ≥ 1 waits
// delay × (1 + (k-1)/(n-1)), all within [delay, 2×delay). One delay for
// every non-preferred node would cost, when the preferred node is dead,
// n-1 simultaneous asks for each of its ticks; ranked, the runner-up asks
// first and the others hear its mark before their turn (the stagger,
// delay/(n-1), is far above a round trip). The spread stays under 2×delay
// however many of the top-ranked nodes are dead, so a dead preferred node
// alone costs exactly the delay.
//
// In a burst (many ticks due at one instant) the preferred nodes may take
// longer than the delay to ask for their share: a waiter whose turn came
// while this node still asks for its own share of the same instant holds
// back until that share is answered, it hears its mark, or the bound
// (deferToBurstLocked), instead of adding a request for a tick still being
// decided.
//
// A node alone, or one whose registry is unknown or stale, has rank 0 and
// asks at once: exactly the behaviour without handoff. Catch-up tries and
// manual runs never wait; node-local ticks take no lock and never reach
// this.

// Preferrer ranks this node among the live nodes for a tick. It must
// answer from memory (a registry refreshed in the background), never by
// asking a backend: it is called for every locked tick.
type Preferrer interface {
	// Rank returns this node's place for tick T of schedule id among the
	// n live nodes it knows, itself included: rank 0 is the preferred
	// node. n ≤ 1 (alone, or nothing known) means no handoff.
	Rank(id string, tick time.Time) (rank, n int)
}

// DefaultHandoffDelay is Options.HandoffDelay's default: far above a
// backend round trip and the delivery of a published mark (a few ms), so
// a live preferred node nearly always decides first, and far below
// max_clock_skew, so a tick a non-preferred node runs is still on time.
const DefaultHandoffDelay = 250 * time.Millisecond

// handoff is a scheduler's side of it: the preferrer, the marks heard and
// the ticks waiting for their turn.
type handoff struct {
	pref    Preferrer
	delay   time.Duration
	watcher locking.TickWatcher // nil: nothing is heard, waits end by time

	// offset is this node's clock minus the backend's (ns), as last
	// measured by a lock operation (clockOffset, tick.go).
	offset atomic.Int64

	mu sync.Mutex
	// heard is the highest mark heard per key: a tick that fires here
	// after its mark was heard (a faster clock elsewhere) drops at once.
	heard map[string]time.Time
	// waiting holds the waiters of each key, as a list through
	// waiter.next and prev (a slice per key was an allocation per
	// waiting tick, and its removal a scan).
	waiting map[string]*waiter
	// nwait counts the waiters not yet heard (WaitSettled, tests).
	nwait     int
	listening bool
	// asking counts, by T (Unix ns), this node's try-lock-ticks in flight
	// for ticks it is preferred for (a burst's share of this node): a
	// waiter whose turn came defers while its T has some (deferToBurstLocked).
	asking map[int64]*asking
	// stopped: the scheduler is shutting down; no tick waits any more.
	stopped bool
	// turns orders the waiters by when their wait ends (waiter.due), and
	// turnTimer, armed for the earliest (turnAt; zero: not armed), ends
	// the waits that are due together (turnsDue, turns.go).
	turns     turnQueue
	turnTimer Timer
	turnAt    time.Time
}

// asking is the count of preferred try-lock-ticks in flight for one T,
// and the waiters deferred until it drops to zero.
type asking struct {
	n        int
	deferred []*waiter
	// failed: an answer of this node's share was an error, not a
	// decision (preferredAnswered).
	failed bool
}

// waiter is a tick waiting for its turn. It holds no goroutine: a burst
// of 10,000 ticks made 6,000 to 7,000 waiters per node, and a worker
// parked in each (its stack grown, then copied) cost the node more CPU than
// the rest of the burst. Whichever ends the wait first (the mark heard,
// the timer, the end of the deferral, shutdown) takes the waiter out of
// handoff.waiting under handoff.mu, and the tick carries on: heard, it is
// finished where it was heard; its turn come (turns.go), at the end of a
// deferral or at shutdown, it goes back to the pool to ask
// (resumeWaiters).
type waiter struct {
	t        *tick
	tick     time.Time
	deadline time.Time     // on the scheduler's clock
	end      time.Time     // the latest end of a deferral (deferToBurstLocked)
	wait     time.Duration // its turn's wait, from when it fired
	// due is when its wait ends: deadline, then, deferred, end; qi is its
	// place in handoff.turns (-1: none). Under handoff.mu.
	due       time.Time
	qi        int
	heard     bool // under handoff.mu
	deferring bool // deferred after its turn came (deferToBurstLocked)
	done      bool // taken out of waiting; under handoff.mu
	// prev, next: w's neighbours in its key's list (handoff.waiting);
	// under handoff.mu.
	prev, next *waiter
}

// initHandoff sets s.hand from the options (nil: no handoff), its map
// of marks heard made for n schedules: a burst hears a mark for each of
// them at once, and a map grown by doubling meanwhile rehashed it a dozen
// times while the node's own ticks waited to start.
func (s *Scheduler) initHandoff(n int) {
	o := s.opts
	if o.Preferrer == nil || o.Locker == nil {
		return
	}
	h := &handoff{pref: o.Preferrer, delay: o.HandoffDelay, watcher: o.Watcher,
		heard: make(map[string]time.Time, n), waiting: map[string]*waiter{},
		asking: map[int64]*asking{}}
	if h.delay == 0 {
		h.delay = min(DefaultHandoffDelay, o.MaxClockSkew/2)
	}
	if h.watcher == nil {
		h.watcher, _ = o.Locker.(locking.TickWatcher)
	}
	s.hand = h
}

// startWatch starts listening to raised marks; the returned function stops
// and waits for it.
func (s *Scheduler) startWatch() (stop func()) {
	h := s.hand
	if h == nil || h.watcher == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(s.jobCtx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Only marks of this node's schedules are kept: the channel carries
		// the whole cluster's, and a key this node never runs would stay
		// in heard for good.
		mark := func(m locking.TickMark) {
			if s.hasSchedule(m.Key) {
				s.resumeWaiters(h.hear(m, nil))
			}
		}
		err := h.watcher.WatchTicks(ctx, locking.TickWatch{Mark: mark, Marks: s.heardMarks, Listening: func() {
			h.mu.Lock()
			h.listening = true
			h.mu.Unlock()
			s.mu.Lock()
			s.notifyLocked()
			s.mu.Unlock()
		}})
		if err != nil && ctx.Err() == nil {
			s.log.Warn("not listening to decided ticks: nodes that wait for a tick's preferred node will ask the backend anyway",
				slog.Any("error", err))
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// heardMarks is the watch's Marks: hear for the marks of one message
// (a batch's), this node's schedules only, each lock taken once for all.
func (s *Scheduler) heardMarks(ms []locking.TickMark) {
	h := s.hand
	kept := ms[:0]
	s.mu.Lock()
	for _, m := range ms {
		if st := s.states[m.Key]; st != nil && !st.removed {
			kept = append(kept, m)
		}
	}
	s.mu.Unlock()
	if len(kept) == 0 {
		return
	}
	var out []*waiter
	h.mu.Lock()
	for _, m := range kept {
		out = h.hearLocked(m, out)
	}
	h.mu.Unlock()
	s.resumeWaiters(out)
}

// hear is told a raised mark: waiters for ticks up to it stop waiting,
// heard; it returns them, appended to out, for resumeWaiters.
func (h *handoff) hear(m locking.TickMark, out []*waiter) []*waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hearLocked(m, out)
}

// hearLocked is hear under h.mu.
func (h *handoff) hearLocked(m locking.TickMark, out []*waiter) []*waiter {
	if m.Tick.After(h.heard[m.Key]) {
		h.heard[m.Key] = m.Tick
	}
	for w := h.waiting[m.Key]; w != nil; {
		next := w.next
		if !w.tick.After(m.Tick) {
			w.heard = true
			h.takeLocked(w)
			out = append(out, w)
		}
		w = next
	}
	return out
}

// takeLocked takes w out of waiting, under h.mu: its wait is over. Only
// one of the ways a wait ends takes it (done).
func (h *handoff) takeLocked(w *waiter) {
	w.done = true
	h.turns.remove(w)
	key := w.t.def.ID
	switch {
	case w.prev != nil:
		w.prev.next = w.next
	case h.waiting[key] == w:
		if w.next == nil {
			delete(h.waiting, key)
		} else {
			h.waiting[key] = w.next
		}
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
	h.nwait--
}

// resumeWaiters carries on ticks whose wait ended: a heard one is
// finished here, as contended, without asking (handedOff); the others go
// back to the pool, together, to ask. Finished in line, not on a worker:
// the watch hears a burst's marks one by one, and a task submitted for
// each had the pool start a worker for nearly each of them.
func (s *Scheduler) resumeWaiters(ws []*waiter) {
	var ts, heard []*tick
	for _, w := range ws {
		if w.heard {
			heard = append(heard, w.t)
			continue
		}
		w.t.step = stepAsk
		ts = append(ts, w.t)
	}
	s.handedOffAll(heard)
	s.work.SubmitAll(ts)
}

// stopWaiting ends every wait at shutdown: the ticks ask now, as without
// handoff.
func (s *Scheduler) stopWaiting() {
	h := s.hand
	if h == nil {
		return
	}
	h.mu.Lock()
	h.stopped = true
	var ws []*waiter
	for _, w := range h.waiting {
		for ; w != nil; w = w.next {
			ws = append(ws, w)
		}
	}
	for _, w := range ws {
		h.takeLocked(w)
	}
	if h.turnTimer != nil {
		h.turnTimer.Stop()
		h.turnAt = time.Time{}
	}
	h.mu.Unlock()
	s.resumeWaiters(ws)
}

// The outcomes of handOff.
type handoffTurn int

const (
	handoffAsk     handoffTurn = iota // ask now
	handoffHeard                      // decided elsewhere: do not ask
	handoffWaiting                    // waiting: back to the pool later
)

// handedOff ends tick t, heard decided elsewhere during its handoff, as
// a "done" answer would (skipped as contended) without asking.
func (s *Scheduler) handedOff(t *tick) {
	s.heardDecided(t)
	s.reportSkip(t, SkipContended, 0)
	s.end(t, runOutcome{skip: SkipContended})
}

// handedOffAll is handedOff for the ticks of one batch of marks heard,
// ended under one acquisition of s.mu (endAll).
func (s *Scheduler) handedOffAll(ts []*tick) {
	for _, t := range ts {
		s.heardDecided(t)
		s.reportSkip(t, SkipContended, 0)
	}
	s.endAll(ts, runOutcome{skip: SkipContended})
}

// handOff is the handoff of locked tick f, before its try-lock-tick: it
// returns handoffHeard when f was decided elsewhere already, handoffAsk
// when this node asks now, and handoffWaiting when f waits for its turn:
// it then carries on when the wait ends (see waiter). It waits only for regular ticks, and never past handoffBound; f's
// lateness (a loop that woke late) counts as time already waited. A tick
// this node is preferred for is marked f.preferred: it counts in h.asking
// until answered.
func (s *Scheduler) handOff(f *tick) handoffTurn {
	h := s.hand
	if h == nil || f.catchup || f.manual != nil {
		return handoffAsk
	}
	p := s.prepareHandoff(f)
	h.mu.Lock()
	turn := s.handOffLocked(f, p)
	h.mu.Unlock()
	if turn == handoffWaiting {
		s.waiterShown()
	}
	return turn
}

// handOffAll is handOff for the regular locked ticks of one wake of the
// loop (dispatch), under one h.mu: a burst's ticks taken each on its own
// worker had thousands of them queue on h.mu, and the pool start more
// workers for the ticks behind them. It sets f.handed on each and returns
// each one's turn.
func (s *Scheduler) handOffAll(fs []*tick, turns []handoffTurn) []handoffTurn {
	h := s.hand
	ps := make([]handoffPrep, len(fs))
	for i, f := range fs {
		ps[i] = s.prepareHandoff(f)
	}
	shown := false
	h.mu.Lock()
	for i, f := range fs {
		f.handed = true
		t := s.handOffLocked(f, ps[i])
		shown = shown || t == handoffWaiting
		turns = append(turns, t)
	}
	h.mu.Unlock()
	if shown {
		s.waiterShown()
	}
	return turns
}

// handoffPrep is what handOff works out for a tick before it takes h.mu.
type handoffPrep struct {
	tick    time.Time // T in whole µs, as marks are
	rank, n int
	wait    time.Duration
	w       *waiter // nil: no wait
}

// prepareHandoff is the part of handOff that needs no lock.
func (s *Scheduler) prepareHandoff(f *tick) handoffPrep {
	h := s.hand
	p := handoffPrep{tick: f.at.Truncate(time.Microsecond)}
	if f.def.Targeted {
		return p // the preferred node may not be one it targets: ask now
	}
	p.rank, p.n = h.pref.Rank(f.def.ID, f.at)
	if p.n <= 1 || p.rank <= 0 {
		return p
	}
	// The turn is counted on the backend's clock: T + delay_k there is
	// T + offset + delay_k here (offset: this node's clock minus the
	// backend's, as last measured). A node whose clock runs ahead would
	// otherwise end its wait before the preferred node even fired, and win
	// the tick; one running behind asks at once when its turn has passed.
	// The bound holds on this node's clock too, whatever the offset: a
	// stale one (a clock stepped since) must not stretch the wait.
	turn := h.delay
	if p.n > 2 {
		turn += h.delay * time.Duration(min(p.rank, p.n-1)-1) / time.Duration(p.n-1)
	}
	bound := s.handoffBound(f)
	offset := time.Duration(h.offset.Load())
	p.wait = min(offset+min(turn, bound), bound) - f.lateness
	if p.wait > 0 {
		now := s.clock.Now()
		p.w = &waiter{t: f, tick: p.tick, deadline: now.Add(p.wait), end: now.Add(bound - f.lateness),
			wait: p.wait, qi: -1}
	}
	return p
}

// handOffLocked decides f's handoff from p, under h.mu.
func (s *Scheduler) handOffLocked(f *tick, p handoffPrep) handoffTurn {
	h := s.hand
	switch {
	case !p.tick.After(h.heard[f.def.ID]):
		// Decided before this node even fired it (its clock runs behind,
		// or its loop woke late): nothing to ask, preferred or not.
		return handoffHeard
	case p.n <= 1:
		return handoffAsk
	case p.rank <= 0:
		h.askLocked(f.at)
		f.preferred = true
		return handoffAsk
	case p.w == nil:
		return handoffAsk
	case h.stopped:
		return handoffAsk // shutting down: ask now, as without handoff
	}
	// The turn is queued, its timer armed, before the waiter is shown
	// (WaitSettled), both under h.mu: a test that moved its clock in
	// between would leave the timer due later than the deadline it saw.
	// The timer's function takes h.mu, so it finds the waiter registered.
	w := p.w
	s.advance(f, tickWaiting)
	s.queueTurnLocked(w, w.deadline)
	if head := h.waiting[f.def.ID]; head != nil {
		head.prev, w.next = w, head
	}
	h.waiting[f.def.ID] = w
	h.nwait++
	return handoffWaiting
}

// waiterShown tells WaitSettled (tests) that a waiter was added.
func (s *Scheduler) waiterShown() {
	if s.idleWanted.Load() {
		s.mu.Lock()
		s.notifyLocked() // WaitSettled re-checks
		s.mu.Unlock()
	}
}

// deferToBurstLocked extends waiter w's wait, once its turn came, while this
// node still has try-lock-ticks in flight for ticks due at the same T
// that it is preferred for: a burst. The preferred nodes of w's tick are
// then most likely as busy with their own share, and asking now would add
// a request for nearly every tick of the burst (all of them still
// undecided) instead of saving one; w rather waits to hear its mark. The
// deferral ends at the latest at w.end (T + handoffBound on the
// scheduler's clock), when this node's share has been answered
// (preferredAnswered), on a mark heard, or on shutdown. It reports whether w is
// deferred; under h.mu.
func (s *Scheduler) deferToBurstLocked(w *waiter) bool {
	h := s.hand
	a := h.asking[w.t.at.UnixNano()]
	if a == nil {
		return false
	}
	left := w.end.Sub(s.clock.Now())
	if left <= 0 {
		return false
	}
	w.deferring = true
	a.deferred = append(a.deferred, w)
	s.queueTurnLocked(w, w.end)
	return true
}

// askLocked counts a try-lock-tick about to be sent for tick T, which
// this node is preferred for; preferredAnswered ends it. Under h.mu.
func (h *handoff) askLocked(tick time.Time) {
	k := tick.UnixNano()
	a := h.asking[k]
	if a == nil {
		a = &asking{}
		h.asking[k] = a
	}
	a.n++
}

// preferredAnswered ends the count of askLocked for tick T, whose
// answer the backend decided or not. When none is left, the waiters
// deferred for T (deferToBurstLocked) wait a turn more, from now, as
// long as they were to wait from T, within their bound: this node's
// share is decided, and the other nodes, as busy with theirs, are most
// likely deciding the waiters' ticks at this moment: asking at once adds
// a request for each tick of theirs still undecided, and nodes end their
// shares at different moments, so a burst's would add thousands, each
// competing with the request of the node preferred for it and decided
// alike. A dead preferred node costs its ticks that turn more,
// never more than the bound. If any answer of the share was an error (the
// backend failing, which the other nodes see too), they ask at once: this
// node may be the only one left to ask.
func (s *Scheduler) preferredAnswered(tick time.Time, decided bool) {
	h := s.hand
	h.mu.Lock()
	k := tick.UnixNano()
	a := h.asking[k]
	if a == nil {
		h.mu.Unlock()
		return
	}
	a.failed = a.failed || !decided
	a.n--
	if a.n > 0 {
		h.mu.Unlock()
		return
	}
	delete(h.asking, k)
	ws := a.deferred[:0]
	now := s.clock.Now()
	for _, w := range a.deferred {
		if w.done {
			continue
		}
		if due := minTime(now.Add(w.wait), w.end); !a.failed && due.After(now) {
			// Shown as waiting for a timer not yet due (settledLocked).
			w.deadline = due
			s.queueTurnLocked(w, due)
			continue
		}
		h.takeLocked(w)
		ws = append(ws, w)
	}
	h.mu.Unlock()
	s.resumeWaiters(ws)
}

// minTime is the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// handoffBound is how long after T (on the backend's clock) f's turn may
// come at the latest. Two limits, each with half its room to spare:
//   - the on-time bound, max(max_clock_skew, window) after T: a tick
//     handed over must not be made late or missed by the wait;
//   - the next tick's earliest claim, next(T) - max_clock_skew: a node
//     whose clock runs ahead by up to max_clock_skew may claim the next
//     tick then, which raises the mark past T, and T, not yet asked for,
//     would be lost. With the default skew of 1s, an every-second
//     schedule has no room: every node asks at once, as without handoff.
func (s *Scheduler) handoffBound(f *tick) time.Duration {
	bound := max(s.opts.MaxClockSkew, f.window(s)) / 2
	if next := f.def.Spec.Next(f.at); !next.IsZero() {
		bound = min(bound, (next.Sub(f.at)-s.opts.MaxClockSkew)/2)
	}
	return bound
}

// heardDecided records that f's tick was decided elsewhere, as a "done"
// answer would: it raises the floor this node passes with try-lock-tick
// (the mark heard was raised by the backend) and skips f as contended.
func (s *Scheduler) heardDecided(f *tick) {
	f.st.decided.raise(f.at)
}

// settledLocked reports, under s.mu, whether every tick in flight is a
// handoff waiting for a timer that is not yet due: the quiet state a
// fake-clock test waits for before it moves the clock (WaitIdle would wait
// for the waiters, which only the clock ends).
func (s *Scheduler) settledLocked() bool {
	h := s.hand
	if h == nil {
		return s.idleLocked()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := s.clock.Now()
	for _, w := range h.waiting {
		for ; w != nil; w = w.next {
			if !w.deadline.After(now) {
				return false
			}
		}
	}
	if s.inflight > h.nwait || !s.parked || s.wakePending {
		return false
	}
	// As idleLocked: parked, but its timer may be due and not yet taken.
	nowNs := now.UnixNano()
	head := s.heap.head()
	return (head == nil || head.at > nowNs) && s.wakeAt > nowNs
}

// hasSchedule reports whether id is one of this node's schedules.
func (s *Scheduler) hasSchedule(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.states[id]
	return st != nil && !st.removed
}

// handOffTasks decides the handoff of the regular locked ticks among the
// loop's ticks at once (handOffAll), before they reach the pool: a tick
// heard decided ends here, one waiting for its turn leaves the list (it
// carries on when its wait ends), and the others go on, to ask.
func (s *Scheduler) handOffTasks(ts []*tick) []*tick {
	if s.hand == nil {
		return ts
	}
	var fs []*tick
	for _, t := range ts {
		if t.def.lock && !t.catchup && t.manual == nil {
			fs = append(fs, t)
		}
	}
	if len(fs) == 0 {
		return ts
	}
	turns := s.handOffAll(fs, make([]handoffTurn, 0, len(fs)))
	kept, j := ts[:0], 0 // fs[j] is the next one decided
	for _, t := range ts {
		turn := handoffAsk
		if j < len(fs) && fs[j] == t {
			turn = turns[j]
			j++
		}
		switch turn {
		case handoffAsk:
			kept = append(kept, t)
		case handoffHeard:
			s.handedOff(t)
		}
	}
	return kept
}
