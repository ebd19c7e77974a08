package workpool

import "testing"

// The queue gives back what it was given, in order, across chunk
// boundaries, while it is drained as it is filled (as a burst's queue is)
// and when it is emptied and filled again; it keeps at most fifoSpare
// drained chunks.
func TestFifoOrderAcrossChunks(t *testing.T) {
	var q fifo[int]
	next, want := 0, 0
	for round, n := range []int{1, fifoChunkLen - 1, fifoChunkLen, fifoChunkLen + 1, 5*fifoChunkLen + 3, (fifoSpare + 3) * fifoChunkLen} {
		// Fill n, taking one out for every three put in, then drain.
		for i := range n {
			q.push(next)
			next++
			if i%3 == 2 {
				if got := q.pop(); got != want {
					t.Fatalf("round %d: pop = %d, want %d", round, got, want)
				}
				want++
			}
		}
		if q.len() != next-want {
			t.Fatalf("round %d: len = %d, want %d", round, q.len(), next-want)
		}
		for q.len() > 0 {
			if f := *q.front(); f != want {
				t.Fatalf("round %d: front = %d, want %d", round, f, want)
			}
			if got := q.pop(); got != want {
				t.Fatalf("round %d: pop = %d, want %d", round, got, want)
			}
			want++
		}
		if want != next {
			t.Fatalf("round %d: %d items out of %d", round, want, next)
		}
		if q.nfree > fifoSpare {
			t.Fatalf("round %d: %d spare chunks kept, at most %d", round, q.nfree, fifoSpare)
		}
	}
}

// A popped slot no longer holds its item, so the GC can take what it
// points to.
func TestFifoPopClearsTheSlot(t *testing.T) {
	var q fifo[*int]
	v := new(int)
	q.push(v)
	q.push(v)
	q.pop()
	if q.head.items[0] != nil {
		t.Fatal("a popped slot still points to its item")
	}
}
