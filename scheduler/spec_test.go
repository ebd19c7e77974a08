package scheduler_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("time.Parse(%q): %v", s, err)
	}
	return v
}

func TestParseSpecErrors(t *testing.T) {
	for _, expr := range []string{
		"",
		"   ",
		"* * * *",                        // 4 fields
		"* * * * * * *",                  // 7 fields
		"61 * * * *",                     // minute out of range
		"* 24 * * *",                     // hour out of range
		"* * 32 * *",                     // day of month out of range
		"* * * 13 *",                     // month out of range
		"* * * * 8",                      // day of week out of range
		"@fortnightly",                   // unknown descriptor
		"@every",                         // missing duration
		"@every ten",                     // bad duration
		"CRON_TZ=Mars/Olympus 0 3 * * *", // unknown zone
		"a b c d e",
	} {
		if _, err := scheduler.ParseSpec(expr, nil); err == nil {
			t.Errorf("ParseSpec(%q) = nil error, want one", expr)
		} else if !strings.HasPrefix(err.Error(), "scheduler:") {
			t.Errorf("ParseSpec(%q) error %q lacks the package prefix", expr, err)
		}
	}
}

// TestNextTicks checks the fire times of every form a schedule can take,
// including the DST changes that robfig/cron documents: a local time that
// does not exist (spring forward) is skipped, and one that happens twice
// (fall back) fires twice for an hourly spec.
func TestNextTicks(t *testing.T) {
	paris := mustLoc(t, "Europe/Paris")
	ny := mustLoc(t, "America/New_York")
	for _, tc := range []struct {
		name string
		expr string
		loc  *time.Location
		from string
		want []string
	}{
		{"5 fields", "30 3 * * *", nil, "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T03:30:00Z", "2026-01-02T03:30:00Z"}},
		{"6 fields with seconds", "*/20 * * * * *", nil, "2026-01-01T00:00:05Z",
			[]string{"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"}},
		{"every second", "*/1 * * * * *", nil, "2026-01-01T00:00:00.5Z",
			[]string{"2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"}},
		{"@hourly", "@hourly", nil, "2026-01-01T00:10:00Z",
			[]string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"}},
		{"@daily in a zone", "@daily", paris, "2026-01-01T12:00:00Z",
			[]string{"2026-01-01T23:00:00Z", "2026-01-02T23:00:00Z"}},
		// 90s does not divide a minute: epoch alignment, not start alignment,
		// is what makes every node agree.
		{"@every 90s epoch-aligned", "@every 90s", nil, "2026-01-01T00:00:01Z",
			[]string{"2026-01-01T00:01:30Z", "2026-01-01T00:03:00Z", "2026-01-01T00:04:30Z"}},
		{"@every 5m", "@every 5m", nil, "2026-01-01T00:07:00Z",
			[]string{"2026-01-01T00:10:00Z", "2026-01-01T00:15:00Z"}},
		{"Europe/Paris via loc", "0 3 * * *", paris, "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T02:00:00Z", "2026-01-02T02:00:00Z"}},
		{"America/New_York via loc", "0 9 * * 1-5", ny, "2026-01-02T00:00:00Z", // a Friday
			[]string{"2026-01-02T14:00:00Z", "2026-01-05T14:00:00Z"}},
		{"CRON_TZ wins over loc", "CRON_TZ=America/New_York 0 9 * * *", paris, "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T14:00:00Z"}},
		{"TZ= prefix", "TZ=Europe/Paris 0 9 * * *", nil, "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T08:00:00Z"}},
		// New York springs forward on 2026-03-08 at 02:00 EST -> 03:00 EDT.
		{"spring forward: 02:30 does not exist that day, skipped", "30 2 * * *", ny, "2026-03-07T12:00:00Z",
			[]string{"2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"}},
		{"spring forward: hourly jumps from 01:00 to 03:00", "0 * * * *", ny, "2026-03-08T05:30:00Z",
			[]string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		// New York falls back on 2026-11-01 at 02:00 EDT -> 01:00 EST.
		{"fall back: hourly fires at both 01:00", "0 * * * *", ny, "2026-11-01T04:30:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
		{"fall back: a nightly 01:30 runs twice", "30 1 * * *", ny, "2026-11-01T04:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z"}},
		// Paris: spring forward on 2026-03-29 at 02:00 CET -> 03:00 CEST.
		{"Paris spring forward skips 02:15", "15 2 * * *", paris, "2026-03-28T12:00:00Z",
			[]string{"2026-03-30T00:15:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := scheduler.ParseSpec(tc.expr, tc.loc)
			if err != nil {
				t.Fatalf("ParseSpec(%q): %v", tc.expr, err)
			}
			at := mustTime(t, tc.from)
			for i, w := range tc.want {
				at = spec.Next(at)
				if want := mustTime(t, w); !at.Equal(want) {
					t.Fatalf("tick %d of %q from %s = %s, want %s", i+1, tc.expr, tc.from,
						at.UTC().Format(time.RFC3339), want.UTC().Format(time.RFC3339))
				}
			}
		})
	}
}
