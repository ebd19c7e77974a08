package cronspec

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Calendar keeps a spec's ticks to some dates and a time range: the
// schedule keys except, start and end.
type Calendar struct {
	// Except lists dates with no tick, in the spec's zone: "2026-12-25",
	// or "*-01-01" for that day of every year.
	Except []string
	// Start and End bound the ticks: none before Start or after End (a
	// tick at either still fires). Zero: no bound.
	Start, End time.Time
}

// ErrCalendar is matched (errors.Is) by WithCalendar's errors.
var ErrCalendar = errors.New("cronspec: bad calendar")

// IsZero reports whether c keeps every tick.
func (c Calendar) IsZero() bool { return len(c.Except) == 0 && c.Start.IsZero() && c.End.IsZero() }

// WithCalendar returns spec keeping only the ticks cal allows; spec itself
// for an empty cal. It judges a tick as the spec without a spread offset
// gives it (a schedule's 23:55 with an offset of 10 minutes is still on
// the 24th), its date in the spec's zone (Location; UTC when unknown). An
// excepted tick is no tick: Next passes over it, so no node fires it and
// no catch-up runs it late; Excepted tells them apart again, for audit.
//
// The error names the bad entry and matches ErrCalendar.
func WithCalendar(spec Spec, cal Calendar) (Spec, error) {
	if o, ok := spec.(offsetSpec); ok { // the offset goes outside: see above
		inner, err := WithCalendar(o.spec, cal)
		if err != nil {
			return nil, err
		}
		return WithOffset(inner, o.off), nil
	}
	if cal.IsZero() || spec == nil {
		return spec, nil
	}
	loc := Location(spec)
	if loc == nil {
		loc = time.UTC
	}
	c, err := newCalendar(cal, loc)
	if err != nil {
		return nil, err
	}
	return calendarSpec{spec: spec, cal: c}, nil
}

// ParseExcept checks one except entry: YYYY-MM-DD, or *-MM-DD for every
// year (*-02-29: the leap years' 29th). The error names the entry and
// matches ErrCalendar.
func ParseExcept(s string) error {
	_, err := parseExcept(s)
	return err
}

// CalendarText is spec's calendar written out in one canonical form
// (except dates sorted, times in UTC), for the schedule's definition hash:
// "" when spec has none.
func CalendarText(spec Spec) string {
	if c := calendarOf(spec); c != nil {
		return c.text
	}
	return ""
}

// Excepted returns spec with the except dates of its calendar lifted
// (start and end kept, its offset too), and a function telling which of
// that spec's ticks the except dates take away: what audit lists as
// skipped by the calendar. ok is false, and all spec itself, when spec
// excepts no date.
func Excepted(spec Spec) (all Spec, excepted func(time.Time) bool, ok bool) {
	off := Offset(spec)
	cs, isCal := Base(spec).(calendarSpec)
	if !isCal || len(cs.cal.except) == 0 {
		return spec, nil, false
	}
	c := cs.cal
	lifted := *c
	lifted.except = nil
	lifted.text = c.text + "\x00lifted" // never shared with a real calendar
	all = WithOffset(calendarSpec{spec: cs.spec, cal: &lifted}, off)
	if lifted.start.IsZero() && lifted.end.IsZero() {
		all = WithOffset(cs.spec, off)
	}
	return all, func(t time.Time) bool { return c.excepted(t.Add(-off)) }, true
}

// Ended reports whether spec's calendar ends before t: a spec that fires
// no more, as its end meant, not one that never could.
func Ended(spec Spec, t time.Time) bool {
	c := calendarOf(spec)
	return c != nil && !c.end.IsZero() && c.end.Add(Offset(spec)).Before(t)
}

func calendarOf(spec Spec) *calendar {
	if cs, ok := Base(spec).(calendarSpec); ok {
		return cs.cal
	}
	return nil
}

// calendarSpec is a spec with a calendar. Both are interned (ParseShared,
// newCalendar), so the same definition is the same comparable value on a
// reload, and the scheduler keeps the schedule as it is.
type calendarSpec struct {
	spec Spec
	cal  *calendar
}

type calendar struct {
	loc        *time.Location
	except     map[int32]struct{} // y*10000 + m*100 + d; y = 0 for every year
	start, end time.Time
	text       string
}

// maxSkipYears bounds how far Next looks past excepted dates, as robfig
// gives up five years on ("0 0 25 12 *" except "*-12-25" never fires).
const maxSkipYears = 5

func (c calendarSpec) Next(t time.Time) time.Time {
	cal := c.cal
	if !cal.start.IsZero() && t.Before(cal.start) {
		t = cal.start.Add(-time.Nanosecond).In(t.Location())
	}
	limit := t.Year() + maxSkipYears
	for {
		n := c.spec.Next(t)
		if n.IsZero() || (!cal.end.IsZero() && n.After(cal.end)) || n.Year() > limit {
			return time.Time{}
		}
		if !cal.excepted(n) {
			return n
		}
		// The rest of the day is excepted too: on from its last instant
		// (where the clock went back over midnight, from n itself).
		y, m, d := n.In(cal.loc).Date()
		end := instantIn(cal.loc, time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)).Add(-time.Nanosecond)
		if !end.After(n) {
			end = n
		}
		t = end.In(n.Location())
	}
}

func (c *calendar) excepted(t time.Time) bool {
	if len(c.except) == 0 {
		return false
	}
	y, m, d := t.In(c.loc).Date()
	md := int32(m)*100 + int32(d)
	_, every := c.except[md]
	_, once := c.except[int32(y)*10000+md]
	return every || once
}

// The interned calendars, bounded as the specs are.
var (
	calendars     sync.Map // calendarKey → *calendar
	calendarCount atomic.Int64
)

type calendarKey struct {
	text string
	loc  *time.Location
}

func newCalendar(cal Calendar, loc *time.Location) (*calendar, error) {
	c := &calendar{loc: loc, start: cal.Start, end: cal.End}
	if !c.start.IsZero() && !c.end.IsZero() && c.end.Before(c.start) {
		return nil, fmt.Errorf("%w: end %s is before start %s", ErrCalendar,
			c.end.Format(time.RFC3339), c.start.Format(time.RFC3339))
	}
	keys := make([]string, 0, len(cal.Except))
	for _, e := range cal.Except {
		k, err := parseExcept(e)
		if err != nil {
			return nil, err
		}
		if c.except == nil {
			c.except = map[int32]struct{}{}
		}
		if _, dup := c.except[k]; !dup {
			c.except[k] = struct{}{}
			keys = append(keys, exceptText(k))
		}
	}
	// Canonical: the same calendar written in another order, or with
	// times in another offset, hashes the same on every node.
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString("except=")
	b.WriteString(strings.Join(keys, ","))
	for _, x := range []struct {
		name string
		t    time.Time
	}{{";start=", c.start}, {";end=", c.end}} {
		b.WriteString(x.name)
		if !x.t.IsZero() {
			b.WriteString(x.t.UTC().Format(time.RFC3339Nano))
		}
	}
	c.text = b.String()
	key := calendarKey{c.text, loc}
	if v, ok := calendars.Load(key); ok {
		return v.(*calendar), nil
	}
	if calendarCount.Add(1) <= maxInterned {
		v, _ := calendars.LoadOrStore(key, c)
		return v.(*calendar), nil
	}
	return c, nil
}

// parseExcept reads YYYY-MM-DD or *-MM-DD into y*10000 + m*100 + d (y = 0
// for every year).
func parseExcept(s string) (int32, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: except entry %q: %s", ErrCalendar, s, why)
	}
	year, md, ok := strings.Cut(s, "-")
	if !ok || len(md) != 5 || md[2] != '-' {
		return 0, bad(`want a date YYYY-MM-DD, or *-MM-DD for every year`)
	}
	m, err1 := strconv.Atoi(md[:2])
	d, err2 := strconv.Atoi(md[3:])
	if err1 != nil || err2 != nil || md[0] == '+' || md[3] == '+' {
		return 0, bad(`want a date YYYY-MM-DD, or *-MM-DD for every year`)
	}
	y := 0
	if year != "*" {
		var err error
		if len(year) != 4 || year[0] == '+' {
			return 0, bad(`want a date YYYY-MM-DD, or *-MM-DD for every year`)
		}
		if y, err = strconv.Atoi(year); err != nil {
			return 0, bad(`want a date YYYY-MM-DD, or *-MM-DD for every year`)
		}
	}
	if m < 1 || m > 12 {
		return 0, bad("no month " + md[:2])
	}
	leap := 2000 // any leap year: *-02-29 is a date
	if y != 0 {
		leap = y
	}
	if d < 1 || d > daysIn(time.Month(m), leap) {
		return 0, bad(fmt.Sprintf("%s has no day %d", time.Month(m), d))
	}
	return int32(y)*10000 + int32(m)*100 + int32(d), nil
}

func exceptText(k int32) string {
	y, md := k/10000, k%10000
	if y == 0 {
		return fmt.Sprintf("*-%02d-%02d", md/100, md%100)
	}
	return fmt.Sprintf("%04d-%02d-%02d", y, md/100, md%100)
}
