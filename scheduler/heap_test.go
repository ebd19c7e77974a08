package scheduler

import (
	"math/rand/v2"
	"testing"
)

// The heap against a plain model: random pushes, removals and time
// changes, then every event must come out in (at, kind) order, with every
// index where the event really is.
func TestEventHeapKeepsOrderAndIndexes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h eventHeap
	var in []*event // the model: events in the heap, any order
	check := func(step int) {
		for i, s := range h {
			if int(s.e.index) != i || s.at != s.e.at || s.kind != s.e.kind {
				t.Fatalf("step %d: slot %d holds index %d, key (%d,%d), event key (%d,%d)",
					step, i, s.e.index, s.at, s.kind, s.e.at, s.e.kind)
			}
			if i > 0 && h.less(i, (i-1)/4) {
				t.Fatalf("step %d: slot %d sorts before its parent", step, i)
			}
		}
	}
	for step := range 5000 {
		switch op := r.IntN(4); {
		case op <= 1 || len(in) == 0:
			e := &event{at: r.Int64N(100), kind: eventKind(r.IntN(2)), index: -1}
			h.push(e)
			in = append(in, e)
		case op == 2:
			k := r.IntN(len(in))
			h.remove(in[k])
			if in[k].index != -1 {
				t.Fatalf("step %d: a removed event keeps index %d", step, in[k].index)
			}
			in = append(in[:k], in[k+1:]...)
		default:
			e := in[r.IntN(len(in))]
			e.at = r.Int64N(100)
			h.fix(e)
		}
		check(step)
	}
	var prev *event
	for len(h) > 0 {
		e := h.head()
		if prev != nil && (e.at < prev.at || e.at == prev.at && e.kind < prev.kind) {
			t.Fatalf("popped (%d,%d) after (%d,%d)", e.at, e.kind, prev.at, prev.kind)
		}
		h.remove(e)
		prev = e
	}
}
