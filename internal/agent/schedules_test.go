package agent

import (
	"fmt"
	"testing"
	"time"
)

// The agent answers for each of its schedules with its own TTL and
// pause_after_failures whether it keeps them all or, given the hashes of
// exactly its ids, only those that differ from the common TTL.
func TestScheduleLookupCompacted(t *testing.T) {
	var defs []Schedule
	hashes := map[string]string{}
	for i := range 100 {
		d := Schedule{ID: fmt.Sprintf("s%03d", 99-i), TTL: time.Minute}
		switch i {
		case 7:
			d.TTL = time.Hour
		case 8:
			d.PauseAfterFailures = 3
		}
		defs = append(defs, d)
		hashes[d.ID] = "h"
	}
	want := map[string]Schedule{}
	for _, d := range defs {
		want[d.ID] = d
	}
	for name, c := range map[string]struct {
		hashes  map[string]string
		compact bool
	}{
		"hashes of every id": {hashes, true},
		"no hashes":          {nil, false},
		"hashes of others":   {map[string]string{"x": "h"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			a := New(nil, nil, Options{})
			a.SetSchedules(append([]Schedule(nil), defs...), c.hashes, "c")
			if got := a.common != nil; got != c.compact {
				t.Fatalf("compacted: %v, want %v", got, c.compact)
			}
			if c.compact && len(a.schedules) != 2 {
				t.Fatalf("kept %d schedules, want the 2 that differ", len(a.schedules))
			}
			for id, w := range want {
				if got, ok := a.schedule(id); !ok || got != w {
					t.Errorf("schedule(%s) = %+v, %v; want %+v", id, got, ok, w)
				}
			}
			for _, id := range []string{"x", "s100", ""} {
				if got, ok := a.schedule(id); ok {
					t.Errorf("schedule(%q) = %+v: not one of the node's", id, got)
				}
			}
		})
	}
}

// Of two schedules with the same id the last one answers, as before: such
// a set is never compacted.
func TestScheduleLookupDuplicate(t *testing.T) {
	a := New(nil, nil, Options{})
	a.SetSchedules([]Schedule{{ID: "a", TTL: time.Minute}, {ID: "a", TTL: time.Hour}, {ID: "b", TTL: time.Minute}},
		map[string]string{"a": "h", "b": "h", "x": "h"}, "c")
	if a.common != nil {
		t.Fatal("compacted a set with a duplicate id")
	}
	if got, _ := a.schedule("a"); got.TTL != time.Hour {
		t.Errorf("schedule(a).TTL = %v, want the last one's 1h", got.TTL)
	}
}
