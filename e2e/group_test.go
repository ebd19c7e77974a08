package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/e2e/internal/ledger"
)

// TestGroupNeverExceedsMaxRunning is the e2e of issue 32's concurrency
// groups: three nodes, five every-second schedules whose runs last 1.5s in
// one group of max_running = 2 (so the group is full most of the time):
// the ledger never shows three of their runs at once, the group's runs
// go on (two at a time), and the full group's ticks are counted as
// group_full.
func TestGroupNeverExceedsMaxRunning(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *Backend) {
		c := startCluster(t, b, Spec{Nodes: 3, GroupSchedules: 5, GroupMax: 2, GroupSleep: 1500 * time.Millisecond})
		grouped := func() []ledger.Run {
			var out []ledger.Run
			for _, r := range ledger.Runs(c.Records()) {
				if strings.HasPrefix(r.Schedule, "grp-") {
					out = append(out, r)
				}
			}
			return out
		}
		deadline := time.Now().Add(60 * time.Second)
		for len(grouped()) < 20 {
			if time.Now().After(deadline) {
				t.Fatalf("only %d runs of the group's schedules in 60s", len(grouped()))
			}
			c.WaitTicks(1, 30*time.Second)
		}
		runs := grouped()
		// The most runs at once: sweep starts and ends.
		type edge struct {
			at    time.Time
			delta int
		}
		var edges []edge
		for _, r := range runs {
			if r.Ending == "" {
				continue // still running (or killed): its end is unknown
			}
			edges = append(edges, edge{r.Start, +1}, edge{r.End, -1})
		}
		slices.SortFunc(edges, func(a, b edge) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.delta - b.delta // an end before a start at the same instant
		})
		most, cur := 0, 0
		for _, e := range edges {
			cur += e.delta
			most = max(most, cur)
		}
		full := 0.0
		for _, n := range c.Nodes() {
			for i := 1; i <= 5; i++ {
				full += n.Counter("bext_scheduler_ticks_skipped_total", "schedule", "grp-"+string(rune('0'+i)), "reason", "group_full")
			}
		}
		t.Logf("%s: %d runs of the group, at most %d at once; %v ticks skipped group_full", b.Kind, len(runs), most, full)
		if most > 2 {
			t.Errorf("%d runs of a max_running = 2 group at once", most)
		}
		if most < 2 {
			t.Errorf("never two runs at once: the group ran below its max_running")
		}
		if full == 0 {
			t.Error("no tick counted group_full, though five 1.5s schedules every second overfill a group of two")
		}
	})
}
