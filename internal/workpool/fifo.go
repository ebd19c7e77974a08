package workpool

// fifo is a first-in first-out queue in chunks of fifoChunkLen items. The
// pool's queues held their tasks in slices, which a burst grew by doubling
// from nothing: 10,000 ticks due at once copied and dropped 3.7 MB of
// slices (a third of a burst's allocations, and the garbage collection
// they brought about ran while the burst's jobs waited to start). A chunk,
// once filled, never moves, and one drained goes to a free list for the
// next (at most fifoSpare of them are kept).
type fifo[T any] struct {
	head, tail *fifoChunk[T]
	hi, ti     int // head.items[hi] is the oldest item; tail.items[ti] the next free slot
	n          int
	free       *fifoChunk[T]
	nfree      int
}

type fifoChunk[T any] struct {
	next  *fifoChunk[T]
	items [fifoChunkLen]T
}

const (
	fifoChunkLen = 256
	// fifoSpare bounds the drained chunks kept: for the pool's queue of
	// tasks, 1.8 MB, which a burst of 16,000 ticks fills.
	fifoSpare = 64
)

func (q *fifo[T]) len() int { return q.n }

// push adds v at the back.
func (q *fifo[T]) push(v T) {
	if q.tail == nil || q.ti == fifoChunkLen {
		c := q.free
		if c != nil {
			q.free, c.next = c.next, nil
			q.nfree--
		} else {
			c = new(fifoChunk[T])
		}
		if q.tail == nil {
			q.head, q.hi = c, 0
		} else {
			q.tail.next = c
		}
		q.tail, q.ti = c, 0
	}
	q.tail.items[q.ti] = v
	q.ti++
	q.n++
}

// front is the oldest item; the queue must not be empty.
func (q *fifo[T]) front() *T { return &q.head.items[q.hi] }

// pop removes and returns the oldest item; the queue must not be empty.
func (q *fifo[T]) pop() T {
	if q.n == 0 {
		// A caller's bug; taken on, it would count the queue below empty
		// and lose the next item pushed.
		panic("scheduler: pop of an empty fifo")
	}
	c := q.head
	v := c.items[q.hi]
	var zero T
	c.items[q.hi] = zero // drop its references for the GC
	q.hi++
	q.n--
	switch {
	case q.n == 0:
		// Empty: the chunk stays, filled again from its start.
		q.hi, q.ti = 0, 0
	case q.hi == fifoChunkLen:
		q.head, q.hi = c.next, 0
		c.next = nil
		if q.nfree < fifoSpare {
			c.next, q.free = q.free, c
			q.nfree++
		}
	}
	return v
}
