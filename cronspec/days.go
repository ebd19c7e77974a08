package cronspec

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// The calendar forms of the day fields, which robfig/cron does not parse
// (Quartz's spelling):
//
//	day of month  L      the last day of the month
//	              L-3    three days before the last day (L-0 is L)
//	              15W    the weekday nearest the 15th, within its month
//	              LW     the last weekday of the month
//	day of week   5L     the last Friday of the month (FRIL too)
//	              MON#2  the second Monday of the month (1#2 too); #1 to #5
//
// L and L-n mix with plain days in a list ("1,15,L"), and xL and x#n with
// plain weekdays ("MON#1,MON#3"); W stands alone in its field (a W with a
// range, a step or a list is refused). When both day fields are
// restricted a day matches either, as robfig/cron and Vixie cron do for
// plain fields ("0 9 L * MON" is the last day and every Monday).
//
// Such a spec is robfig's with both day fields relaxed to *, whose ticks
// the dayFilter keeps to the matching days: robfig's own search does the
// time of day, the months and daylight saving as for any spec, and a
// plain spec never reaches this code.
type dayFilter struct {
	months uint64 // robfig's month bits: the months searched
	// domStar, dowStar: the field was * or ?, so only the other one
	// decides (robfig's starBit rule).
	domStar, dowStar bool

	domPlain    uint64 // plain days of the month, bits 1..31
	domLast     []int  // L-n: n days before the last (0 for L)
	domNearest  int    // nW: the weekday nearest day n; 0 for none
	domLastWeek bool   // LW

	dowPlain uint8    // plain weekdays, bit 0 = Sunday
	dowLast  uint8    // xL: the last x of the month, bit x
	dowNth   [6]uint8 // x#n: bit x of dowNth[n]
}

// parseDays reads the calendar forms of expr's day fields (5 or 6 fields,
// no descriptor). It returns nil when neither field uses one, and
// otherwise the filter and expr with both day fields relaxed to *.
func parseDays(expr string) (*dayFilter, string, error) {
	if strings.HasPrefix(expr, "@") {
		return nil, expr, nil
	}
	f := strings.Fields(expr)
	if len(f) != 5 && len(f) != 6 {
		return nil, expr, nil // robfig reports the count
	}
	domI, dowI := 2, 4
	if len(f) == 6 {
		domI, dowI = 3, 5
	}
	dom, dow := strings.ToUpper(f[domI]), strings.ToUpper(f[dowI])
	// No weekday or month name holds an L or a #; no day of the month
	// has a name.
	if !strings.ContainsAny(dom, "LW") && !strings.ContainsAny(dow, "L#") {
		return nil, expr, nil
	}
	d := &dayFilter{domStar: dom == "*" || dom == "?", dowStar: dow == "*" || dow == "?"}
	// plainBits parses the plain items of one day field with robfig, in
	// a spec of their own (a mistake in another field is robfig's to
	// report, below, not this field's).
	plainBits := func(dom bool, items []string, name, field string) (uint64, error) {
		if len(items) == 0 {
			return 0, nil
		}
		g := []string{"0", "0", "0", "*", "*", "*"}
		if dom {
			g[3] = strings.Join(items, ",")
		} else {
			g[5] = strings.Join(items, ",")
		}
		s, err := specParser.Parse(strings.Join(g, " "))
		if err != nil {
			return 0, fmt.Errorf("%s field %q: %w", name, field, err)
		}
		ss := s.(*cron.SpecSchedule)
		if dom {
			return ss.Dom &^ starBit, nil
		}
		return ss.Dow &^ starBit, nil
	}
	if !d.domStar {
		plain, err := d.parseDom(dom, f[domI])
		if err != nil {
			return nil, "", err
		}
		if d.domPlain, err = plainBits(true, plain, "day-of-month", f[domI]); err != nil {
			return nil, "", err
		}
	}
	if !d.dowStar {
		plain, err := d.parseDow(dow, f[dowI])
		if err != nil {
			return nil, "", err
		}
		b, err := plainBits(false, plain, "day-of-week", f[dowI])
		if err != nil {
			return nil, "", err
		}
		d.dowPlain = uint8(b & 0x7f)
	}
	f[domI], f[dowI] = "*", "*"
	return d, strings.Join(f, " "), nil
}

// parseDom takes the L and W items of the day-of-month field (upper-cased
// in field, as written in orig) and returns its plain items.
func (d *dayFilter) parseDom(field, orig string) (plain []string, err error) {
	items := strings.Split(field, ",")
	bad := func(format string, args ...any) error {
		return fmt.Errorf("day-of-month field %q: %s", orig, fmt.Sprintf(format, args...))
	}
	for _, it := range items {
		switch {
		case it == "LW" || strings.HasSuffix(it, "W"):
			if len(items) > 1 {
				return nil, bad("W stands alone in its field (15W or LW), not in a list")
			}
			if it == "LW" {
				d.domLastWeek = true
				continue
			}
			n, err := strconv.Atoi(it[:len(it)-1])
			if err != nil || n < 1 || n > 31 {
				return nil, bad("%q: W takes one day of the month, 1 to 31 (such as 15W), not a range or a step", it)
			}
			d.domNearest = n
		case it == "L":
			d.domLast = append(d.domLast, 0)
		case strings.HasPrefix(it, "L-"):
			n, err := strconv.Atoi(it[2:])
			if err != nil || n < 0 || n > 30 {
				return nil, bad("%q: L-n takes a number of days from 0 to 30 (L-3: three days before the last)", it)
			}
			d.domLast = append(d.domLast, n)
		case strings.ContainsAny(it, "LW"):
			return nil, bad("%q: L stands alone or as L-n or LW; W follows a single day (15W)", it)
		default:
			plain = append(plain, it)
		}
	}
	return plain, nil
}

// parseDow takes the xL and x#n items of the day-of-week field and
// returns its plain items.
func (d *dayFilter) parseDow(field, orig string) (plain []string, err error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("day-of-week field %q: %s", orig, fmt.Sprintf(format, args...))
	}
	for _, it := range strings.Split(field, ",") {
		switch {
		case strings.Contains(it, "#"):
			x, n, _ := strings.Cut(it, "#")
			wd, ok := weekday(x)
			k, err := strconv.Atoi(n)
			if !ok || err != nil || k < 1 || k > 5 {
				return nil, bad("%q: # takes one weekday (0-6 or SUN-SAT) and its rank in the month, 1 to 5 (MON#2: the second Monday), not a range or a step", it)
			}
			d.dowNth[k] |= 1 << wd
		case strings.HasSuffix(it, "L"):
			wd, ok := weekday(it[:len(it)-1])
			if !ok {
				return nil, bad("%q: L follows one weekday (5L or FRIL: the last Friday of the month), not a range or a step", it)
			}
			d.dowLast |= 1 << wd
		case strings.Contains(it, "L"):
			return nil, bad("%q: L follows one weekday (5L: the last Friday of the month)", it)
		default:
			plain = append(plain, it)
		}
	}
	return plain, nil
}

// weekday reads one weekday as robfig does: 0-6 (Sunday is 0) or a name.
func weekday(s string) (int, bool) {
	for i, n := range [...]string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"} {
		if s == n {
			return i, true
		}
	}
	if len(s) == 1 && s[0] >= '0' && s[0] <= '6' {
		return int(s[0] - '0'), true
	}
	return 0, false
}

// mask is the days of month m of year y that match, bits 1..31.
func (d *dayFilter) mask(y int, m time.Month) uint64 {
	n := daysIn(m, y)
	wd1 := int(time.Date(y, m, 1, 0, 0, 0, 0, time.UTC).Weekday())
	wdOf := func(day int) int { return (wd1 + day - 1) % 7 }
	var dom, dow uint64
	if !d.domStar {
		dom = d.domPlain & (1<<(n+1) - 2)
		for _, k := range d.domLast {
			if n-k >= 1 {
				dom |= 1 << (n - k)
			}
		}
		if d.domNearest > 0 && d.domNearest <= n {
			dom |= 1 << nearestWeekday(d.domNearest, n, wdOf(d.domNearest))
		}
		if d.domLastWeek {
			dom |= 1 << nearestWeekday(n, n, wdOf(n))
		}
	}
	if !d.dowStar {
		for x := range 7 {
			first := 1 + (x-wd1+7)%7 // the first x of the month
			if d.dowPlain&(1<<x) != 0 {
				for day := first; day <= n; day += 7 {
					dow |= 1 << day
				}
			}
			if d.dowLast&(1<<x) != 0 {
				dow |= 1 << (n - (wdOf(n)-x+7)%7)
			}
			for k := 1; k <= 5; k++ {
				if day := first + 7*(k-1); d.dowNth[k]&(1<<x) != 0 && day <= n {
					dow |= 1 << day
				}
			}
		}
	}
	switch {
	case d.domStar:
		return dow
	case d.dowStar:
		return dom
	}
	return dom | dow
}

// nearestWeekday is Quartz's W: day itself from Monday to Friday; the
// Friday before a Saturday, the Monday after a Sunday, never leaving the
// month (a Saturday the 1st gives Monday the 3rd; a Sunday the last gives
// the Friday before).
func nearestWeekday(day, n, wd int) int {
	switch time.Weekday(wd) {
	case time.Saturday:
		if day == 1 {
			return 3
		}
		return day - 1
	case time.Sunday:
		if day == n {
			return day - 2
		}
		return day + 1
	}
	return day
}

// searchYears bounds how far the filter looks for a matching day, as
// robfig/cron gives up five years on.
const searchYears = 5

// next is the first matching date at or after y-m-d; ok false when none
// lies within searchYears.
func (d *dayFilter) next(y int, m time.Month, day int) (int, time.Month, int, bool) {
	for range 12*searchYears + 1 {
		if d.months&(1<<uint(m)) != 0 {
			if b := d.mask(y, m) &^ (1<<day - 1); b != 0 {
				return y, m, bits.TrailingZeros64(b), true
			}
		}
		day = 1
		if m++; m > time.December {
			m, y = time.January, y+1
		}
	}
	return 0, 0, 0, false
}

// filtered is sched.Next kept to the filter's days, their dates read in
// loc: sched is the spec with relaxed day fields, in loc (zoned) or UTC
// (wall clock). A tick on a day that does not match moves the search to
// the next day that does.
func (c *cronSpec) filtered(sched *cron.SpecSchedule, t time.Time, loc *time.Location) time.Time {
	for {
		w := sched.Next(t)
		if w.IsZero() {
			return w
		}
		y, m, day := w.In(loc).Date()
		ny, nm, nd, ok := c.days.next(y, m, day)
		if !ok {
			return time.Time{}
		}
		if ny == y && nm == m && nd == day {
			return w
		}
		// From just before the day's first instant (its midnight, or the
		// end of a gap over it). Where the clock went back over midnight,
		// that instant may lie behind w: step on from w then.
		start := instantIn(loc, time.Date(ny, nm, nd, 0, 0, 0, 0, time.UTC)).Add(-time.Nanosecond)
		if !start.After(w) {
			start = w
		}
		t = start.In(t.Location())
	}
}

// minDayGap is minDayGap for the filter's days.
func (d *dayFilter) minDayGap() int64 {
	var best, day, prev int64 = 0, 0, -1
	for y := 2001; y < 2001+28; y++ {
		for m := time.January; m <= time.December; m++ {
			n := daysIn(m, y)
			if d.months&(1<<uint(m)) != 0 {
				for b := d.mask(y, m); b != 0; b &= b - 1 {
					at := day + int64(bits.TrailingZeros64(b)) - 1
					if prev >= 0 && (best == 0 || at-prev < best) {
						best = at - prev
					}
					prev = at
				}
			}
			day += int64(n)
		}
	}
	return best
}
