package rendezvous

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func TestNodeRankIsOneOrderOnEveryNode(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	counts := map[string]int{}
	for i := range 10000 {
		tick := t0.Add(time.Duration(i) * time.Second)
		ranks := make([]bool, len(ids))
		for _, id := range ids {
			r, n := New(id, ids).Rank("s", tick)
			if n != len(ids) {
				t.Fatalf("n = %d, want %d", n, len(ids))
			}
			if ranks[r] {
				t.Fatalf("tick %v: two nodes have rank %d", tick, r)
			}
			ranks[r] = true
			if r == 0 {
				counts[id]++
			}
		}
	}
	for id, n := range counts {
		if n < 1800 || n > 2200 {
			t.Errorf("%s preferred for %d of 10000 ticks, want about 2000", id, n)
		}
	}
	// Alone, or self only: rank 0 of 1.
	if r, n := New("a", nil).Rank("s", t0); r != 0 || n != 1 {
		t.Errorf("alone: rank %d of %d", r, n)
	}
	// A node leaving moves only the ticks it was preferred for.
	moved := 0
	for i := range 1000 {
		tick := t0.Add(time.Duration(i) * time.Second)
		before := Preferred("s", ids, tick)
		after := Preferred("s", ids[:4], tick)
		if before != after {
			moved++
			if before != "e" {
				t.Fatalf("tick %v moved from %s to %s when e left", tick, before, after)
			}
		}
	}
	t.Logf("preferred per node over 10000 ticks: %v; e leaving moved %d of 1000", counts, moved)
}
