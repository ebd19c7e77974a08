package cronspec

import (
	"math/rand/v2"
	"testing"
	"time"
)

// refDay is the day rule of L, W and # worked out from its definition, day
// by day, apart from dayFilter.mask: L-n is n days before the month's last;
// nW the weekday of the month nearest the nth (no two are equally near);
// LW the month's last weekday; xL an x with no x a week later in the
// month; x#k an x in the kth run of seven days.
func (d *dayFilter) refDay(y int, m time.Month, day int) bool {
	dim := time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
	wd := func(x int) time.Weekday { return time.Date(y, m, x, 0, 0, 0, 0, time.UTC).Weekday() }
	weekday := func(x int) bool { return wd(x) != time.Saturday && wd(x) != time.Sunday }
	dom := d.domPlain&(1<<day) != 0
	for _, k := range d.domLast {
		dom = dom || day+k == dim
	}
	if n := d.domNearest; n > 0 && n <= dim && weekday(day) {
		nearest := true
		for x := 1; x <= dim; x++ {
			if weekday(x) && abs(x-n) < abs(day-n) {
				nearest = false
			}
		}
		dom = dom || nearest
	}
	if d.domLastWeek && weekday(day) {
		last := true
		for x := day + 1; x <= dim; x++ {
			last = last && !weekday(x)
		}
		dom = dom || last
	}
	x := int(wd(day))
	dow := d.dowPlain&(1<<x) != 0 || (d.dowLast&(1<<x) != 0 && day+7 > dim)
	for k := 1; k <= 5; k++ {
		dow = dow || (d.dowNth[k]&(1<<x) != 0 && (day-1)/7+1 == k)
	}
	switch {
	case d.domStar:
		return dow
	case d.dowStar:
		return dom
	}
	return dom || dow
}

func abs(x int) int { return max(x, -x) }

// randomDaySpecs are day fields with L, W and #, alone, in lists, and
// beside plain ones.
var randomDoms = []string{"*", "L", "L-1", "L-3", "L-30", "15W", "1W", "31W", "30W", "LW", "1,15,L", "L,L-7", "2-5,L", "?", "29", "1W"}
var randomDows = []string{"*", "5L", "FRI#2", "1#1", "MON#2,MON#4", "0L", "6#5", "1-5", "SAT#1,SUNL", "?", "0#5", "2L,4#3"}

func randomDaySpec(r *rand.Rand) string {
	times := []string{"0 12", "30 2", "*/15 *", "0 */3", "45 1", "0 0", "15 1-3"}
	months := []string{"*", "*", "2", "3,10,11", "1-6"}
	for {
		dom, dow := randomDoms[r.IntN(len(randomDoms))], randomDows[r.IntN(len(randomDows))]
		if dom == "*" && dow == "*" || dom == "?" && dow == "?" {
			continue
		}
		return times[r.IntN(len(times))] + " " + dom + " " + months[r.IntN(len(months))] + " " + dow
	}
}

// Over six years (two of them leap years) every day's match is the reference rule's, and Next from
// just before each matching day's noon lands on it, in UTC.
func TestDaysMatchTheirDefinition(t *testing.T) {
	t.Parallel()
	for _, dom := range randomDoms {
		for _, dow := range randomDows {
			expr := "0 12 " + dom + " * " + dow
			if dom == "*" && dow == "*" || dom == "?" && dow == "?" {
				continue
			}
			spec, err := Parse(expr, nil)
			if err != nil {
				t.Fatalf("Parse(%q): %v", expr, err)
			}
			c := spec.(*cronSpec)
			if c.days == nil {
				continue // plain: robfig's
			}
			at := time.Date(2023, 12, 31, 12, 0, 0, 0, time.UTC)
			next := spec.Next(at)
			for day := at.AddDate(0, 0, 1); day.Year() < 2030; day = day.AddDate(0, 0, 1) {
				if !c.days.refDay(day.Year(), day.Month(), day.Day()) {
					continue
				}
				if !next.Equal(day) {
					t.Fatalf("%q: tick %s, want %s (%s)", expr, next.Format(time.RFC3339), day.Format(time.RFC3339), day.Weekday())
				}
				next = spec.Next(next)
			}
		}
	}
}

// Prev and Next agree on the calendar forms: the previous tick of a tick
// is the one whose Next it is, and the tick is its own Prev, from random
// times over years of leap days and both daylight-saving changes, in
// Paris, New York and UTC.
func TestPrevNextRoundTripDays(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	start := time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, zone := range []string{"Europe/Paris", "America/New_York", "UTC"} {
		loc, err := LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for range 80 {
			expr := randomDaySpec(r)
			spec, err := Parse(expr, loc)
			if err != nil {
				t.Fatalf("Parse(%q): %v", expr, err)
			}
			if spec.Next(start).IsZero() {
				continue // 30W in February: config refuses it
			}
			for range 12 {
				at := start.Add(time.Duration(r.Int64N(int64(6 * 365 * 24 * time.Hour))))
				n := spec.Next(at)
				if n.IsZero() {
					t.Fatalf("%s %q: no tick after %v", zone, expr, at)
				}
				const limit = 5 * 366 * 24 * time.Hour
				if p := Prev(spec, n, limit); !p.Equal(n) {
					t.Fatalf("%s %q: Prev(Next(%v) = %v) = %v", zone, expr, at, n, p)
				}
				p := Prev(spec, n.Add(-time.Nanosecond), limit)
				if p.IsZero() || !p.Before(n) || !spec.Next(p).Equal(n) || p.After(at) {
					t.Fatalf("%s %q: before %v (Next of %v): Prev %v, whose Next is %v", zone, expr, n, at, p, spec.Next(p))
				}
				if a := spec.Next(n); !a.After(n) {
					t.Fatalf("%s %q: Next(%v) = %v does not move on", zone, expr, n, a)
				}
			}
		}
	}
}

// MinPeriod sees the calendar forms' days: the last day of the month comes
// 28 days after the last of January at the least.
func TestMinPeriodOfDays(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want time.Duration
	}{
		{"0 3 L * *", 28 * 24 * time.Hour},
		{"0 3 * * 5L", 28 * 24 * time.Hour},
		{"0 3 * * MON#1,MON#3", 14 * 24 * time.Hour},
		{"0 3 L,1 * *", 24 * time.Hour},
		{"*/5 * LW * *", 5 * time.Minute},
		// February's 15th and March's share their weekday (or, in a leap
		// year, March's is a day later): no 15W closer than 28 days.
		{"0 3 15W * *", 28 * 24 * time.Hour},
	} {
		spec, err := Parse(tc.expr, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := MinPeriod(spec); got != tc.want {
			t.Errorf("MinPeriod(%q) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}
