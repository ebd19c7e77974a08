package cronspec_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
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

func TestParseErrors(t *testing.T) {
	for _, expr := range []string{
		"",
		"   ",
		"* * * *",       // 4 fields
		"* * * * * * *", // 7 fields
		"61 * * * *",    // minute out of range
		"* 24 * * *",    // hour out of range
		"* * 32 * *",    // day of month out of range
		"* * * 13 *",    // month out of range
		"* * * * 8",     // day of week out of range
		"@fortnightly",  // unknown descriptor
		"@every",        // missing duration
		"@every ten",    // bad duration
		"@every 0s",     // robfig/cron made these every second
		"@every -5m",
		"@every 500ms",
		"@every 1500ms", // not whole seconds
		"@every 1m0.5s",
		"CRON_TZ=Europe/Paris", // robfig/cron panics on this
		"TZ=Europe/Paris ",
		"CRON_TZ=Europe/Paris @every 0s",
		"CRON_TZ=Mars/Olympus 0 3 * * *", // unknown zone
		"a b c d e",
	} {
		if _, err := cronspec.Parse(expr, nil); err == nil {
			t.Errorf("Parse(%q) = nil error, want one", expr)
		} else if !strings.HasPrefix(err.Error(), "scheduler:") {
			t.Errorf("Parse(%q) error %q lacks the scheduler: prefix (kept from before the move out of the engine)", expr, err)
		}
	}
}

// TestNextTicks checks the fire times of every form a schedule can take.
// The daylight-saving cases are in TestNextDST.
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
		{"@every 1h30m, any zone", "CRON_TZ=Europe/Paris @every 1h30m", nil, "2026-01-01T00:07:00Z",
			[]string{"2026-01-01T01:30:00Z", "2026-01-01T03:00:00Z"}},
		{"Europe/Paris via loc", "0 3 * * *", paris, "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T02:00:00Z", "2026-01-02T02:00:00Z"}},
		{"America/New_York via loc", "0 9 * * 1-5", ny, "2026-01-02T00:00:00Z", // a Friday
			[]string{"2026-01-02T14:00:00Z", "2026-01-05T14:00:00Z"}},
		{"CRON_TZ wins over loc", "CRON_TZ=America/New_York 0 9 * * *", paris, "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T14:00:00Z"}},
		{"TZ= prefix", "TZ=Europe/Paris 0 9 * * *", nil, "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T08:00:00Z"}},
		{"TZ= prefix and a tab", "TZ=Europe/Paris\t0 9 * * *", nil, "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T08:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := cronspec.Parse(tc.expr, tc.loc)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.expr, err)
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

// TestNextDST pins the daylight-saving rule (DESIGN.md "Cron semantics at
// daylight-saving changes", as cronie does it): a fixed hour runs a
// repeated wall-clock time once, at its first occurrence, and a skipped one
// at the first instant after the gap; a * or stepped hour fires on every
// real instant that matches.
//
// Paris: 2026-03-29 02:00 CET -> 03:00 CEST (at 01:00Z); 2026-10-25 03:00
// CEST -> 02:00 CET (at 01:00Z), so 02:xx is 00:xxZ, then again 01:xxZ.
// New York: 2026-03-08 02:00 EST -> 03:00 EDT (at 07:00Z); 2026-11-01 02:00
// EDT -> 01:00 EST (at 06:00Z), so 01:xx is 05:xxZ, then again 06:xxZ.
func TestNextDST(t *testing.T) {
	paris := mustLoc(t, "Europe/Paris")
	ny := mustLoc(t, "America/New_York")
	for _, tc := range []struct {
		name string
		expr string
		loc  *time.Location
		from string
		want []string
	}{
		// Europe/Paris, spring forward, fixed hour.
		{"Paris spring fixed: 02:30 runs at 03:00 CEST", "30 2 * * *", paris, "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"Paris spring fixed: 02:00 and 03:00 are one instant, run once", "0 2,3 * * *", paris, "2026-03-28T23:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T01:00:00Z"}},
		{"Paris spring fixed: 01:59 is untouched", "59 1 * * *", paris, "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T00:59:00Z", "2026-03-29T23:59:00Z"}},
		{"Paris spring fixed, seconds: the whole skipped hour runs once", "*/20 * 2 * * *", paris, "2026-03-28T23:59:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T00:00:20Z"}},
		{"Paris spring @daily: midnight exists, unaffected", "@daily", paris, "2026-03-28T12:00:00Z",
			[]string{"2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"}},
		// Europe/Paris, spring forward, * or stepped hour.
		{"Paris spring *: 02:30 does not exist", "30 * * * *", paris, "2026-03-29T00:00:00Z",
			[]string{"2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z", "2026-03-29T02:30:00Z"}},
		{"Paris spring stepped: 02:00 does not exist", "0 */2 * * *", paris, "2026-03-28T23:30:00Z",
			[]string{"2026-03-29T02:00:00Z", "2026-03-29T04:00:00Z"}},
		{"Paris spring seconds: 01:59:30 CET then 03:00:00 CEST", "*/30 * * * * *", paris, "2026-03-29T00:59:00Z",
			[]string{"2026-03-29T00:59:30Z", "2026-03-29T01:00:00Z", "2026-03-29T01:00:30Z"}},
		// Europe/Paris, fall back, fixed hour.
		{"Paris fall fixed: 02:30 runs once, in CEST", "30 2 * * *", paris, "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"Paris fall fixed: from inside the repeat", "30 2 * * *", paris, "2026-10-25T01:10:00Z",
			[]string{"2026-10-26T01:30:00Z"}},
		{"Paris fall fixed: from after the first 02:30", "30 2 * * *", paris, "2026-10-25T00:45:00Z",
			[]string{"2026-10-26T01:30:00Z"}},
		{"Paris fall fixed: 03:00 comes an hour after the repeat began", "0 2,3 * * *", paris, "2026-10-24T23:00:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-26T01:00:00Z"}},
		{"Paris fall fixed, seconds: the repeated hour once", "*/20 * 2 * * *", paris, "2026-10-25T00:59:30Z",
			[]string{"2026-10-25T00:59:40Z", "2026-10-26T01:00:00Z"}},
		{"Paris fall fixed, seconds field", "0 30 2 * * *", paris, "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		// Europe/Paris, fall back, * or stepped hour.
		{"Paris fall *: 02:30 twice", "30 * * * *", paris, "2026-10-25T00:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:30:00Z"}},
		{"Paris fall stepped: 02:00 twice", "0 */2 * * *", paris, "2026-10-24T23:00:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T03:00:00Z"}},
		{"Paris fall seconds: every real second", "*/30 * * * * *", paris, "2026-10-25T00:59:00Z",
			[]string{"2026-10-25T00:59:30Z", "2026-10-25T01:00:00Z", "2026-10-25T01:00:30Z"}},

		// America/New_York, spring forward.
		{"NY spring fixed: 02:30 runs at 03:00 EDT", "30 2 * * *", ny, "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"}},
		{"NY spring fixed, seconds", "15 45 2 * * *", ny, "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:45:15Z"}},
		{"NY spring fixed: 03:00 itself", "0 3 * * *", ny, "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T07:00:00Z"}},
		{"NY spring *: hourly jumps from 01:00 to 03:00", "0 * * * *", ny, "2026-03-08T05:30:00Z",
			[]string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		{"NY spring seconds *", "0 */30 * * * *", ny, "2026-03-08T06:15:00Z",
			[]string{"2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"}},
		// America/New_York, fall back.
		{"NY fall fixed: a nightly 01:30 runs once, in EDT", "30 1 * * *", ny, "2026-11-01T04:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"NY fall fixed: from inside the repeat", "45 1 * * *", ny, "2026-11-01T06:10:00Z",
			[]string{"2026-11-02T06:45:00Z"}},
		{"NY fall fixed: 02:00 EST follows the repeat", "0 1,2 * * *", ny, "2026-11-01T04:00:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z", "2026-11-02T06:00:00Z"}},
		{"NY fall fixed, seconds", "30 30 1 * * *", ny, "2026-11-01T04:00:00Z",
			[]string{"2026-11-01T05:30:30Z", "2026-11-02T06:30:30Z"}},
		{"NY fall *: hourly fires at both 01:00", "0 * * * *", ny, "2026-11-01T04:30:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
		{"NY fall seconds *", "0 */30 * * * *", ny, "2026-11-01T05:45:00Z",
			[]string{"2026-11-01T06:00:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:00:00Z"}},
		{"NY fall stepped", "30 1-3/1 * * *", ny, "2026-11-01T05:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:30:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := cronspec.Parse(tc.expr, tc.loc)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.expr, err)
			}
			at := mustTime(t, tc.from)
			for i, w := range tc.want {
				at = spec.Next(at)
				if want := mustTime(t, w); !at.Equal(want) {
					t.Fatalf("tick %d of %q from %s = %s (%s), want %s (%s)", i+1, tc.expr, tc.from,
						at.UTC().Format(time.RFC3339), at.In(tc.loc).Format(time.RFC3339),
						want.UTC().Format(time.RFC3339), want.In(tc.loc).Format(time.RFC3339))
				}
			}
		})
	}
}
