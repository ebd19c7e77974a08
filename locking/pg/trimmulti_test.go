package pg

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	store "github.com/bext-dev/bext-scheduler/cluster"
)

// TestClusterTrimSeveralSchedules: one batch that trims several schedules
// at once (and records one under its bound) leaves each trimmed schedule
// its own newest keep runs, the untrimmed one all of its, and a schedule
// not in the batch untouched, whatever the order of the batch.
func TestClusterTrimSeveralSchedules(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()
	const keep = 5 // threshold 6
	// d is stored first and never in a batch again; "A" differs from "a"
	// only by case.
	var d []store.Run
	for i := range 4 {
		d = append(d, testRun("d", i))
	}
	if err := l.RecordRuns(ctx, d, 100); err != nil {
		t.Fatal(err)
	}
	// Each name's runs at i in [from, to), step 1.
	batch := func(spans map[string][2]int) []store.Run {
		var rs []store.Run
		for name, sp := range spans {
			for i := sp[0]; i < sp[1]; i++ {
				rs = append(rs, testRun(name, i))
			}
		}
		rand.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
		return rs
	}
	history := func(name string) []string {
		got, err := l.Runs(ctx, name, 100)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range got {
			ids = append(ids, r.RunID)
		}
		return ids
	}
	newest := func(name string, from, to int) []string {
		var ids []string
		for i := to - 1; i >= from; i-- {
			ids = append(ids, fmt.Sprintf("%s-run-%d", name, i))
		}
		return ids
	}
	// Stored: a 0..3, b 0..3, A 0..3, c 0..3 (no trim: under 6 each).
	if err := l.RecordRuns(ctx, batch(map[string][2]int{"a": {0, 4}, "b": {0, 4}, "A": {0, 4}, "c": {0, 4}}), keep); err != nil {
		t.Fatal(err)
	}
	// a +5, b +3, A +3: all three past 6, trimmed in one statement; c +1
	// reaches 5 only.
	if err := l.RecordRuns(ctx, batch(map[string][2]int{"a": {4, 9}, "b": {4, 7}, "A": {10, 13}, "c": {4, 5}}), keep); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"a": newest("a", 4, 9),
		"b": newest("b", 2, 7),
		"A": append(newest("A", 10, 13), newest("A", 2, 4)...),
		"c": newest("c", 0, 5),
		"d": newest("d", 0, 4),
	}
	for name, w := range want {
		if got := history(name); !slices.Equal(got, w) {
			t.Errorf("history of %q = %v, want %v", name, got, w)
		}
	}
}
