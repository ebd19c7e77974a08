package scheduler

import "time"

// The handoff's turns: when a waiter's wait ends by time (handoff.go).
//
// The waiters share one timer, armed for the earliest end, and the
// waits that are due when it fires end together on its goroutine. A
// timer per waiter starts a goroutine for each wait that ends by time: in
// a burst, thousands, in its tail, where the ticks still to start compete
// with them for the CPU. The waits of one T and one rank end within
// microseconds of each other, so one wake ends them all.

// turnQueue is a min-heap of waiters by waiter.due, each knowing its
// place (waiter.qi), so that a wait that ends otherwise (heard, deferred
// until answered, shutdown) leaves it at once. Under handoff.mu.
type turnQueue []*waiter

func (q turnQueue) less(i, j int) bool { return q[i].due.Before(q[j].due) }

func (q turnQueue) swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].qi, q[j].qi = i, j
}

func (q turnQueue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			return
		}
		q.swap(i, p)
		i = p
	}
}

func (q turnQueue) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(q) {
			return
		}
		m := l
		if r := l + 1; r < len(q) && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			return
		}
		q.swap(i, m)
		i = m
	}
}

// push queues w, whose due is set.
func (q *turnQueue) push(w *waiter) {
	w.qi = len(*q)
	*q = append(*q, w)
	q.up(w.qi)
}

// remove takes w out of the queue, if it is in it.
func (q *turnQueue) remove(w *waiter) {
	i := w.qi
	if i < 0 {
		return
	}
	last := len(*q) - 1
	if i != last {
		q.swap(i, last)
	}
	(*q)[last] = nil
	*q = (*q)[:last]
	w.qi = -1
	if i != last {
		q.down(i)
		q.up(i)
	}
}

// head is the waiter whose wait ends first, nil when none waits.
func (q turnQueue) head() *waiter {
	if len(q) == 0 {
		return nil
	}
	return q[0]
}

// queueTurnLocked makes w's wait end at due (w's turn, or the end of its
// deferral), arming the shared timer earlier if due comes before the time
// it is armed for. Under h.mu.
func (s *Scheduler) queueTurnLocked(w *waiter, due time.Time) {
	h := s.hand
	h.turns.remove(w)
	w.due = due
	h.turns.push(w)
	if h.turnAt.IsZero() || due.Before(h.turnAt) {
		s.armTurnsLocked(due)
	}
}

// armTurnsLocked arms the shared timer for at. Under h.mu.
func (s *Scheduler) armTurnsLocked(at time.Time) {
	h := s.hand
	h.turnAt = at
	d := at.Sub(s.clock.Now())
	if h.turnTimer == nil {
		h.turnTimer = s.clock.AfterFunc(d, s.turnsDue)
	} else {
		h.turnTimer.Reset(d)
	}
}

// turnsDue is the shared timer: every waiter whose wait has ended by now
// asks, unless its turn came while this node still asks for its share of
// the same instant's ticks (deferToBurstLocked: it is queued again, for
// the deferral's end). The ticks go to the pool together, as the ones
// resumed when a deferral ends (resumeWaiters). The timer is then armed
// for the next wait to end. A fire that finds nothing due (its waiter
// taken meanwhile, or a second fire after a re-arm) only re-arms it.
func (s *Scheduler) turnsDue() {
	h := s.hand
	h.mu.Lock()
	h.turnAt = time.Time{}
	now := s.clock.Now()
	var ws []*waiter
	for w := h.turns.head(); w != nil && !w.due.After(now); w = h.turns.head() {
		h.turns.remove(w)
		if !w.deferring && s.deferToBurstLocked(w) {
			continue
		}
		h.takeLocked(w)
		ws = append(ws, w)
	}
	if w := h.turns.head(); w != nil && !h.stopped {
		s.armTurnsLocked(w.due)
	}
	h.mu.Unlock()
	s.resumeWaiters(ws)
}
