package cronspec_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
)

// TestNextDays pins each calendar form of the day fields (L, L-n, nW, LW,
// xL, x#n) on dates worked out by hand: leap years, 30- and 31-day
// months, W at the edges of a month, and daylight saving.
func TestNextDays(t *testing.T) {
	paris := mustLoc(t, "Europe/Paris")
	ny := mustLoc(t, "America/New_York")
	for _, tc := range []struct {
		name string
		expr string
		loc  *time.Location
		from string
		want []string
	}{
		{"L: leap February, 31 and 30 days", "0 12 L * *", nil, "2024-01-31T13:00:00Z",
			[]string{"2024-02-29T12:00:00Z", "2024-03-31T12:00:00Z", "2024-04-30T12:00:00Z"}},
		{"L in February over a leap year", "0 12 L 2 *", nil, "2025-01-01T00:00:00Z",
			[]string{"2025-02-28T12:00:00Z", "2026-02-28T12:00:00Z", "2027-02-28T12:00:00Z", "2028-02-29T12:00:00Z"}},
		{"L-3", "0 12 L-3 * *", nil, "2024-02-01T00:00:00Z",
			[]string{"2024-02-26T12:00:00Z", "2024-03-28T12:00:00Z", "2024-04-27T12:00:00Z"}},
		{"1,15,L: plain days and L in a list", "0 12 1,15,L * *", nil, "2026-02-14T00:00:00Z",
			[]string{"2026-02-15T12:00:00Z", "2026-02-28T12:00:00Z", "2026-03-01T12:00:00Z"}},
		{"15W: the 15th a Saturday gives Friday the 14th", "0 12 15W * *", nil, "2026-08-01T00:00:00Z",
			[]string{"2026-08-14T12:00:00Z", "2026-09-15T12:00:00Z"}},
		{"15W: the 15th a Sunday gives Monday the 16th", "0 12 15W * *", nil, "2026-11-01T00:00:00Z",
			[]string{"2026-11-16T12:00:00Z", "2026-12-15T12:00:00Z"}},
		{"1W: the 1st a Saturday gives Monday the 3rd, not the 31st before", "0 12 1W * *", nil, "2026-07-15T00:00:00Z",
			[]string{"2026-08-03T12:00:00Z", "2026-09-01T12:00:00Z"}},
		{"1W: the 1st a Sunday gives Monday the 2nd", "0 12 1W 2 *", nil, "2026-01-15T00:00:00Z",
			[]string{"2026-02-02T12:00:00Z"}},
		{"30W: the last day a Sunday gives the Friday before", "0 12 30W 11 *", nil, "2025-10-01T00:00:00Z",
			[]string{"2025-11-28T12:00:00Z", "2026-11-30T12:00:00Z"}},
		{"31W: no tick in a 30-day month", "0 12 31W * *", nil, "2026-04-01T00:00:00Z",
			[]string{"2026-05-29T12:00:00Z", "2026-07-31T12:00:00Z"}},
		{"LW: last day a Saturday, a Sunday, a Tuesday", "0 12 LW * *", nil, "2026-01-01T00:00:00Z",
			[]string{"2026-01-30T12:00:00Z", "2026-02-27T12:00:00Z", "2026-03-31T12:00:00Z"}},
		{"LW on a Sunday the 31st", "0 12 LW 5 *", nil, "2026-01-01T00:00:00Z",
			[]string{"2026-05-29T12:00:00Z"}},
		{"5L: the last Friday", "0 12 * * 5L", nil, "2026-01-01T00:00:00Z",
			[]string{"2026-01-30T12:00:00Z", "2026-02-27T12:00:00Z", "2026-03-27T12:00:00Z"}},
		{"FRIL, lower case", "0 12 * * fril", nil, "2026-01-01T00:00:00Z",
			[]string{"2026-01-30T12:00:00Z"}},
		{"MON#2", "0 12 * * MON#2", nil, "2026-02-01T00:00:00Z",
			[]string{"2026-02-09T12:00:00Z", "2026-03-09T12:00:00Z", "2026-04-13T12:00:00Z"}},
		{"1#2 is MON#2", "0 12 * * 1#2", nil, "2026-07-15T00:00:00Z",
			[]string{"2026-08-10T12:00:00Z"}},
		{"FRI#5: only the months with five Fridays", "0 12 * * FRI#5", nil, "2026-01-01T00:00:00Z",
			[]string{"2026-01-30T12:00:00Z", "2026-05-29T12:00:00Z"}},
		{"MON#1,MON#3", "0 9 * * MON#1,MON#3", nil, "2026-02-01T00:00:00Z",
			[]string{"2026-02-02T09:00:00Z", "2026-02-16T09:00:00Z", "2026-03-02T09:00:00Z"}},
		{"both day fields restricted: either matches", "0 12 L * MON", nil, "2026-01-26T13:00:00Z",
			[]string{"2026-01-31T12:00:00Z", "2026-02-02T12:00:00Z", "2026-02-09T12:00:00Z"}},
		{"? in the day of month", "0 12 ? * 5L", nil, "2026-01-01T00:00:00Z",
			[]string{"2026-01-30T12:00:00Z"}},
		{"six fields", "30 0 12 L * *", nil, "2026-04-01T00:00:00Z",
			[]string{"2026-04-30T12:00:30Z"}},
		{"in a zone: the zone's last day", "0 0 L * *", paris, "2026-01-01T00:00:00Z",
			[]string{"2026-01-30T23:00:00Z", "2026-02-27T23:00:00Z"}},
		// The last day of March 2024 was the spring change in Paris: 02:30
		// is skipped, and runs at 03:00 CEST as any fixed hour does.
		{"L on the spring change: at the end of the gap", "30 2 L 3 *", paris, "2024-01-01T00:00:00Z",
			[]string{"2024-03-31T01:00:00Z", "2025-03-31T00:30:00Z"}},
		{"0L on the autumn change: the repeated 02:30 once, in CEST", "30 2 * 10 0L", paris, "2026-10-01T00:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2027-10-31T00:30:00Z"}}, // the change again
		{"SUN#1 on New York's autumn change: 01:30 once, in EDT", "30 1 * 11 SUN#1", ny, "2026-10-01T00:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2027-11-07T05:30:00Z"}},
		{"stepped hours on the last Sunday of October in Paris: every real instant", "0 */2 * 10 0L", paris, "2026-10-24T23:30:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T03:00:00Z"}},
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

// The calendar forms refused, each with a message naming its field.
func TestParseDaysErrors(t *testing.T) {
	for _, tc := range []struct{ expr, field string }{
		{"0 12 1-5W * *", "day-of-month"},
		{"0 12 15W,20 * *", "day-of-month"},
		{"0 12 */2W * *", "day-of-month"},
		{"0 12 W * *", "day-of-month"},
		{"0 12 32W * *", "day-of-month"},
		{"0 12 LW,1 * *", "day-of-month"},
		{"0 12 L-31 * *", "day-of-month"},
		{"0 12 L/2 * *", "day-of-month"},
		{"0 12 1L * *", "day-of-month"},
		{"0 12 L,40 * *", "day-of-month"},
		{"0 12 * * L", "day-of-week"},
		{"0 12 * * 1-5L", "day-of-week"},
		{"0 12 * * MON#6", "day-of-week"},
		{"0 12 * * MON#0", "day-of-week"},
		{"0 12 * * MON#1-2", "day-of-week"},
		{"0 12 * * 7L", "day-of-week"},
		{"0 12 * * FOO#1", "day-of-week"},
		{"0 12 * * 5L,9", "day-of-week"},
		{"61 12 1,L * *", "minute"}, // robfig's message, not the day field's
		{"0 12 1,L 13 *", "month"},
	} {
		_, err := cronspec.Parse(tc.expr, nil)
		if err == nil {
			t.Errorf("Parse(%q) = nil error, want one", tc.expr)
			continue
		}
		if tc.field == "minute" || tc.field == "month" {
			if strings.Contains(err.Error(), "day-of") {
				t.Errorf("Parse(%q): %q blames a day field", tc.expr, err)
			}
			continue
		}
		if !strings.Contains(err.Error(), tc.field+" field") || !strings.HasPrefix(err.Error(), "scheduler:") {
			t.Errorf("Parse(%q): %q does not name the %s field", tc.expr, err, tc.field)
		}
	}
}
