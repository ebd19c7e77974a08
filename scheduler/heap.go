package scheduler

// eventKind orders events due at the same instant: a schedule's tick fires
// before a lingering claim on it is released, so the tick can reuse the
// claim instead of racing its release.
type eventKind uint8

const (
	eventFire    eventKind = iota // a schedule's next tick
	eventRelease                  // the end of a lingering claim (claim.go)
)

// event is one entry of the loop's timer heap. Schedules and claims embed
// theirs, so the heap allocates nothing per fire.
type event struct {
	at    int64 // Unix nanoseconds by the scheduler's clock
	kind  eventKind
	index int // position in the heap; -1 when not in it
	st    *schedState
	claim *claim // set for eventRelease
}

// eventHeap is a binary min-heap of events by (at, kind). Push, pop, fix
// and remove cost O(log n) in the number of schedules: the loop never scans
// or sorts all of them.
type eventHeap []*event

func (h eventHeap) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].kind < h[j].kind
}

func (h eventHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *eventHeap) push(e *event) {
	e.index = len(*h)
	*h = append(*h, e)
	h.up(e.index)
}

// head returns the earliest event, or nil.
func (h eventHeap) head() *event {
	if len(h) == 0 {
		return nil
	}
	return h[0]
}

// remove takes e out of the heap; e must be in it.
func (h *eventHeap) remove(e *event) {
	i := e.index
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	e.index = -1
	if i != last {
		h.fix(i)
	}
}

// fix restores the heap after the event at i changed its time.
func (h eventHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h eventHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h eventHeap) down(i int) bool {
	start := i
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > start
}
