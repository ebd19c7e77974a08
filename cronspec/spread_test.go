package cronspec_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
)

func TestSpreadOffsetStableAndInRange(t *testing.T) {
	// Pinned: a change here moves every spread schedule's ticks, and nodes
	// on the old and new version would then lock different ticks.
	for _, tc := range []struct {
		id     string
		spread time.Duration
		want   time.Duration
	}{
		{"nightly-report", 10 * time.Minute, 3*time.Minute + 47*time.Second},
		{"job-1", 10 * time.Minute, 9*time.Minute + 49*time.Second},
		{"job-1", 0, 0},
		{"job-1", 999 * time.Millisecond, 0},
		{"job-1", time.Second, 0},
	} {
		if got := cronspec.SpreadOffset(tc.id, tc.spread); got != tc.want {
			t.Errorf("SpreadOffset(%q, %v) = %v, want %v", tc.id, tc.spread, got, tc.want)
		}
	}
	for i := range 2000 {
		id := fmt.Sprintf("s%d", i)
		for _, spread := range []time.Duration{1500 * time.Millisecond, 7 * time.Second, time.Hour} {
			o := cronspec.SpreadOffset(id, spread)
			if o < 0 || o >= spread || o%time.Second != 0 {
				t.Fatalf("SpreadOffset(%q, %v) = %v: not whole seconds in [0, spread)", id, spread, o)
			}
			if again := cronspec.SpreadOffset(id, spread); again != o {
				t.Fatalf("SpreadOffset(%q, %v) = %v, then %v", id, spread, o, again)
			}
		}
	}
}

// TestSpreadEvensOutHourly: 1,000 @hourly schedules spread over ten
// minutes. An offset that depends on the id alone (as it must: see
// SpreadOffset) lands like random throws, so single seconds see clusters
// of 5 or 6 where the mean is 1.7; what spread promises is that no stretch
// of the ten minutes is crowded: every 10-second window holds less than
// twice its mean, and every second of the ten minutes below 4x the mean.
func TestSpreadEvensOutHourly(t *testing.T) {
	const n, spread = 1000, 10 * time.Minute
	from := time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC)
	perSecond := map[int64]int{}
	for i := range n {
		id := fmt.Sprintf("job-%d", i)
		spec, err := cronspec.Parse("@hourly", nil)
		if err != nil {
			t.Fatal(err)
		}
		tick := cronspec.WithOffset(spec, cronspec.SpreadOffset(id, spread)).Next(from)
		off := tick.Sub(time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC))
		if off < 0 || off >= spread {
			t.Fatalf("%s ticks at %s, outside the spread", id, tick)
		}
		perSecond[int64(off/time.Second)]++
	}
	mean := float64(n) / spread.Seconds()
	busiest, windowMax := 0, 0
	for s := range int64(spread.Seconds()) {
		busiest = max(busiest, perSecond[s])
		if s%10 == 0 {
			w := 0
			for k := s; k < s+10; k++ {
				w += perSecond[k]
			}
			windowMax = max(windowMax, w)
		}
	}
	t.Logf("mean %.2f a second; busiest second %d; busiest 10 s window %d (mean %.1f)", mean, busiest, windowMax, 10*mean)
	if float64(windowMax) >= 2*10*mean {
		t.Errorf("a 10 s window holds %d ticks, twice the mean is %.1f", windowMax, 20*mean)
	}
	if float64(busiest) >= 4*mean {
		t.Errorf("a second holds %d ticks, 4x the mean is %.1f", busiest, 4*mean)
	}
	if len(perSecond) < int(spread.Seconds())*3/4 {
		t.Errorf("only %d of %v seconds used", len(perSecond), spread)
	}
}

func TestWithOffset(t *testing.T) {
	paris := mustLoc(t, "Europe/Paris")
	spec, err := cronspec.Parse("30 2 * * *", paris)
	if err != nil {
		t.Fatal(err)
	}
	if cronspec.WithOffset(spec, 0) != spec {
		t.Error("WithOffset(spec, 0) is not spec")
	}
	o := cronspec.WithOffset(spec, 7*time.Minute)
	if got := cronspec.Offset(o); got != 7*time.Minute {
		t.Errorf("Offset = %v", got)
	}
	if got := cronspec.Offset(cronspec.WithOffset(o, time.Minute)); got != 8*time.Minute {
		t.Errorf("offsets do not compose: %v", got)
	}
	if cronspec.Location(o) != paris {
		t.Errorf("Location = %v", cronspec.Location(o))
	}
	// The offset tick is the tick: from just before it, and from the cron
	// time itself (already passed by nobody), Next gives cron time + offset.
	for _, tc := range []struct{ from, want string }{
		{"2026-01-10T01:30:00Z", "2026-01-10T01:37:00Z"},
		{"2026-01-10T01:36:59Z", "2026-01-10T01:37:00Z"},
		{"2026-01-10T01:37:00Z", "2026-01-11T01:37:00Z"},
		// the DST rule is the cron time's: 02:30 skipped runs at 03:00 CEST, +7m
		{"2026-03-28T12:00:00Z", "2026-03-29T01:07:00Z"},
	} {
		if got := o.Next(mustTime(t, tc.from)); !got.Equal(mustTime(t, tc.want)) {
			t.Errorf("Next(%s) = %s, want %s", tc.from, got.UTC().Format(time.RFC3339), tc.want)
		}
	}
	never, err := cronspec.Parse("0 0 30 2 *", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cronspec.WithOffset(never, time.Minute).Next(mustTime(t, "2026-01-01T00:00:00Z")); !got.IsZero() {
		t.Errorf("a schedule that never fires fires at %s once offset", got)
	}
}

func TestMinPeriod(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want time.Duration
	}{
		{"@every 90s", 90 * time.Second},
		{"*/1 * * * * *", time.Second},
		{"*/5 * * * * *", 5 * time.Second},
		{"0,59 * * * *", time.Minute}, // 00:59 -> 01:00
		{"@hourly", time.Hour},
		{"0 0,23 * * *", time.Hour},
		{"@daily", 24 * time.Hour},
		{"30 2 * * *", 24 * time.Hour},
		{"0 9 * * 1-5", 24 * time.Hour},
		{"0 9 * * 1,4", 3 * 24 * time.Hour},
		{"@weekly", 7 * 24 * time.Hour},
		{"@monthly", 28 * 24 * time.Hour},
		{"0 0 1,31 1,12 *", 24 * time.Hour}, // Dec 31 -> Jan 1
		{"@yearly", 365 * 24 * time.Hour},
		{"0 0 29 2 *", 4*365*24*time.Hour + 24*time.Hour},
		{"0 0 30 2 *", 0}, // never fires
	} {
		spec, err := cronspec.Parse(tc.expr, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := cronspec.MinPeriod(spec); got != tc.want {
			t.Errorf("MinPeriod(%q) = %v, want %v", tc.expr, got, tc.want)
		}
		if got := cronspec.MinPeriod(cronspec.WithOffset(spec, time.Second)); got != tc.want {
			t.Errorf("MinPeriod(%q offset) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}

func TestApplySpreadOnce(t *testing.T) {
	spec, err := cronspec.Parse("@hourly", nil)
	if err != nil {
		t.Fatal(err)
	}
	off := cronspec.SpreadOffset("nightly-report", 10*time.Minute)
	once := cronspec.ApplySpread(spec, "nightly-report", 10*time.Minute)
	twice := cronspec.ApplySpread(once, "nightly-report", 10*time.Minute)
	if cronspec.Offset(once) != off || cronspec.Offset(twice) != off {
		t.Errorf("offsets %v then %v, want %v both times", cronspec.Offset(once), cronspec.Offset(twice), off)
	}
	if cronspec.ApplySpread(spec, "x", 0) != spec {
		t.Error("no spread changed the spec")
	}
}
