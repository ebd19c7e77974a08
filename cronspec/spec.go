package cronspec

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"
)

// Spec computes a schedule's fire times. It is robfig/cron's Schedule:
// Next returns the first fire time strictly after t.
type Spec interface {
	Next(t time.Time) time.Time
}

// specParser accepts 5 fields, an optional leading seconds field, and the
// descriptors (@hourly, @daily, @every 90s, ...). Parse strips the
// CRON_TZ=/TZ= prefix itself (robfig/cron panics on a prefix with nothing
// after it, and leaves a schedule without one in time.Local).
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
	cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse parses a cron expression evaluated in loc (nil means UTC). A
// CRON_TZ= or TZ= prefix in expr wins over loc (config refuses the two
// together unless they agree: see CronTZ). Besides robfig/cron's syntax,
// the day fields take Quartz's L, L-n, nW, LW, xL and x#n (days.go).
//
// Daylight saving is handled as cronie does (DESIGN.md "Cron semantics at
// daylight-saving changes"): when the hour field is fixed (neither * nor
// stepped; @daily, @weekly, @monthly and @yearly are), a wall-clock time that
// occurs twice runs once, at its first occurrence, and one skipped by a jump
// forward runs at the first instant after the gap. A spec whose hour field is
// * or stepped fires on every real instant whose wall clock matches, so an
// hourly job runs twice in the repeated hour and not in the skipped one.
//
// `@every D` needs D of at least one second and in whole seconds, and is
// aligned to the Unix epoch (ticks at whole multiples of D), not to the
// moment the process started as in robfig/cron: every node must compute the
// same tick times or the cluster lock cannot tell one tick from another.
func Parse(expr string, loc *time.Location) (Spec, error) {
	sp, _, err := ParseShared(expr, loc)
	return sp, err
}

// ParseShared is Parse that also returns the expression as interned
// with the spec, so the schedules of one expression share its text too.
func ParseShared(expr string, loc *time.Location) (Spec, string, error) {
	if loc == nil {
		loc = time.UTC
	}
	// Specs are immutable: schedules with the same expression in the same
	// zone share one (a fleet often repeats a handful of expressions).
	key := specKey{expr, loc}
	if s, ok := specs.Load(key); ok {
		in := s.(*interned)
		return in.spec, in.expr, nil
	}
	s, err := parseSpec(expr, loc)
	if err != nil {
		return nil, expr, err
	}
	if specCount.Add(1) <= maxInterned {
		shared, _ := specs.LoadOrStore(key, &interned{s, expr})
		in := shared.(*interned)
		return in.spec, in.expr, nil
	}
	return s, expr, nil
}

// The interned specs, bounded so that a process reloading ever-new
// expressions does not grow without end (past the bound, specs are simply
// not shared).
var (
	specs     sync.Map // specKey → *interned
	specCount atomic.Int64
)

type interned struct {
	spec Spec
	expr string
}

const maxInterned = 1 << 16

type specKey struct {
	expr string
	loc  *time.Location
}

// parseSpec's errors keep the "scheduler: " prefix they had when this code
// was the engine's: the scheduler reports them as they are, and config
// strips that prefix from its messages.
func parseSpec(expr string, loc *time.Location) (Spec, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, fmt.Errorf("scheduler: empty cron expression")
	}
	if loc == nil {
		loc = time.UTC
	}
	zone, rest, hasZone, err := splitTZ(expr)
	if err != nil {
		return nil, fmt.Errorf("scheduler: cron expression: %w", err)
	}
	if hasZone {
		if loc, err = LoadLocation(zone); err != nil {
			return nil, fmt.Errorf("scheduler: cron expression: unknown time zone %q: %w", zone, err)
		}
	}
	if d, ok, err := parseEvery(rest); ok {
		if err != nil {
			return nil, fmt.Errorf("scheduler: cron expression: %w", err)
		}
		return everySpec{every: d, loc: loc}, nil
	}
	days, robfigExpr, err := parseDays(rest)
	if err != nil {
		return nil, fmt.Errorf("scheduler: cron expression: %w", err)
	}
	s, err := specParser.Parse(robfigExpr)
	if err != nil {
		return nil, fmt.Errorf("scheduler: cron expression: %w", err)
	}
	ss, ok := s.(*cron.SpecSchedule)
	if !ok { // the parser returns nothing else once @every is handled above
		return nil, fmt.Errorf("scheduler: cron expression %q: unexpected schedule type %T", expr, s)
	}
	if days != nil {
		days.months = ss.Month
	}
	zoned, wall := *ss, *ss
	zoned.Location, wall.Location = loc, time.UTC
	return &cronSpec{
		loc:       loc,
		zoned:     &zoned,
		wall:      &wall,
		days:      days,
		fixedHour: loc != time.UTC && fixedHour(rest),
	}, nil
}

// CronTZ returns the zone named by expr's CRON_TZ= or TZ= prefix, if it has
// one. Config uses it to refuse a prefix that disagrees with `timezone`.
func CronTZ(expr string) (zone string, ok bool) {
	zone, _, ok, _ = splitTZ(strings.TrimSpace(expr))
	return zone, ok
}

// Location returns the time zone spec fires in (the CRON_TZ= prefix, or
// the location Parse was given), or nil for a Spec Parse did not
// make.
func Location(spec Spec) *time.Location {
	switch s := spec.(type) {
	case *cronSpec:
		return s.loc
	case everySpec:
		return s.loc
	case offsetSpec:
		return Location(s.spec)
	case calendarSpec:
		return s.cal.loc
	}
	return nil
}

// splitTZ separates a CRON_TZ=/TZ= prefix from the schedule after it.
func splitTZ(expr string) (zone, rest string, ok bool, err error) {
	var p string
	switch {
	case strings.HasPrefix(expr, "CRON_TZ="):
		p = "CRON_TZ="
	case strings.HasPrefix(expr, "TZ="):
		p = "TZ="
	default:
		return "", expr, false, nil
	}
	i := strings.IndexAny(expr, " \t")
	if i < 0 {
		return expr[len(p):], "", true, fmt.Errorf("%s%s is followed by no schedule", p, expr[len(p):])
	}
	return expr[len(p):i], strings.TrimSpace(expr[i:]), true, nil
}

// parseEvery reads `@every D`; ok says expr is one.
func parseEvery(expr string) (d time.Duration, ok bool, err error) {
	const every = "@every"
	if expr != every && !strings.HasPrefix(expr, every+" ") && !strings.HasPrefix(expr, every+"\t") {
		return 0, false, nil
	}
	arg := strings.TrimSpace(expr[len(every):])
	if arg == "" {
		return 0, true, fmt.Errorf("@every needs a duration, such as @every 5m")
	}
	d, err = time.ParseDuration(arg)
	switch {
	case err != nil:
		return 0, true, fmt.Errorf("@every %s: %w", arg, err)
	case d < time.Second:
		return 0, true, fmt.Errorf("@every %s: the interval must be at least 1s", arg)
	case d%time.Second != 0:
		return 0, true, fmt.Errorf("@every %s: the interval must be whole seconds", arg)
	}
	return d, true, nil
}

// fixedHour reports whether the hour field of a 5- or 6-field spec (or a
// descriptor) names fixed hours: no *, ? or step. robfig's bit sets cannot
// tell "*/1" from "0-23", so the text decides.
func fixedHour(expr string) bool {
	if strings.HasPrefix(expr, "@") {
		return expr != "@hourly" // @yearly, @monthly, @weekly, @daily: hour 0
	}
	f := strings.Fields(expr)
	h := f[1]
	if len(f) == 6 {
		h = f[2]
	}
	return !strings.ContainsAny(h, "*?/")
}

// cronSpec is a parsed cron expression. zoned is robfig's schedule in loc,
// which fires on every real instant whose wall clock matches; wall is the
// same fields in UTC, where wall-clock arithmetic has no gaps or repeats.
type cronSpec struct {
	loc       *time.Location
	zoned     *cron.SpecSchedule
	wall      *cron.SpecSchedule
	fixedHour bool // and loc is not UTC: the daylight-saving rules apply
	// days keeps the ticks to the days of L, W and # (days.go); nil for a
	// spec without them, whose day fields robfig matches itself.
	days *dayFilter
	// period caches minPeriod (+1, so 0 means not yet computed): it walks
	// the calendar, and Prev asks for it on every run.
	period atomic.Int64
}

// knownPeriod is MinPeriod(spec), computed once per cron spec.
func knownPeriod(spec Spec) time.Duration {
	switch s := spec.(type) {
	case everySpec:
		return s.every
	case offsetSpec:
		return knownPeriod(s.spec)
	case calendarSpec: // a lower bound: the calendar only takes ticks away
		return knownPeriod(s.spec)
	case *cronSpec:
		p := s.period.Load()
		if p == 0 {
			p = int64(s.minPeriod()) + 1
			s.period.Store(p)
		}
		return time.Duration(p - 1)
	}
	return 0
}

// probeStart is where Prev starts probing back from now: spec's
// shortest period when known, bounded by limit, at least a second. From a
// second, a daily spec took 17 doublings (a Next each) to find its
// previous tick, and every run asks for it (scheduler.Tick.PrevTime).
func probeStart(spec Spec, limit time.Duration) time.Duration {
	return max(time.Second, min(knownPeriod(spec), limit))
}

func (c *cronSpec) Next(t time.Time) time.Time {
	if !c.fixedHour {
		if c.days != nil {
			return c.filtered(c.zoned, t, c.loc)
		}
		return c.zoned.Next(t)
	}
	return c.nextFixed(t)
}

// wallNext is the next matching wall-clock time after w (both written in
// UTC).
func (c *cronSpec) wallNext(w time.Time) time.Time {
	if c.days != nil {
		return c.filtered(c.wall, w, time.UTC)
	}
	return c.wall.Next(w)
}

// maxZoneJump bounds how far a zone's offset can move at one transition
// (Samoa skipped a whole day in 2011): farther than this from a
// transition, a wall-clock time has exactly one instant.
const maxZoneJump = 26 * time.Hour

// nextFixed finds the next matching wall-clock time after t's wall clock
// and maps it to an instant: the first occurrence of a repeated time, the
// end of the gap for a skipped one. That map never goes backwards, so the
// first wall-clock match whose instant is after t is the answer.
func (c *cronSpec) nextFixed(t time.Time) time.Time {
	lt := t.In(c.loc)
	_, off := lt.Zone()
	start := wallClock(lt, off)
	if ps, _ := lt.ZoneBounds(); !ps.IsZero() && t.Before(ps.Add(maxZoneJump)) {
		// In the repeat after a fall back, every wall-clock time up to the
		// end of the repeat already had its first occurrence (before ps).
		_, prev := ps.Add(-time.Nanosecond).In(c.loc).Zone()
		if d := time.Duration(prev-off) * time.Second; d > 0 && t.Before(ps.Add(d)) {
			start = wallClock(ps, off).Add(d - time.Nanosecond)
		}
	}
	for {
		w := c.wallNext(start)
		if w.IsZero() {
			return w
		}
		if i := c.instant(w); i.After(t) {
			return i.In(t.Location())
		}
		start = w // a repeat the skip above did not cover: walk on
	}
}

// wallClock is x's wall clock in a zone off seconds east of UTC, written
// as a UTC time.
func wallClock(x time.Time, off int) time.Time {
	return time.Unix(x.Unix()+int64(off), int64(x.Nanosecond())).UTC()
}

// instant maps wall-clock time w (written in UTC) to an instant in c.loc:
// its only instant; its first one when the clock went back over it; the
// first instant after the gap when the clock jumped over it.
func (c *cronSpec) instant(w time.Time) time.Time { return instantIn(c.loc, w) }

// instantIn is cronSpec.instant in loc.
func instantIn(loc *time.Location, w time.Time) time.Time {
	if loc == time.UTC {
		return w
	}
	i := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	ps, pe := i.ZoneBounds()
	if (ps.IsZero() || i.Sub(ps) > maxZoneJump) && (pe.IsZero() || pe.Sub(i) > maxZoneJump) {
		return i // far from any transition: time.Date is unambiguous
	}
	u := w.Unix()
	var first time.Time
	try := func(x time.Time) { // x: any instant of a zone period
		x = x.In(loc)
		_, off := x.Zone()
		s, e := x.ZoneBounds()
		cand := time.Unix(u-int64(off), int64(w.Nanosecond()))
		if (s.IsZero() || !cand.Before(s)) && (e.IsZero() || cand.Before(e)) &&
			(first.IsZero() || cand.Before(first)) {
			first = cand
		}
	}
	if !ps.IsZero() {
		try(ps.Add(-time.Nanosecond))
	}
	try(i)
	if !pe.IsZero() {
		try(pe)
	}
	if !first.IsZero() {
		return first
	}
	// In a gap: w is on neither side of the transition it falls in.
	for _, b := range []time.Time{ps, pe} {
		if b.IsZero() {
			continue
		}
		_, before := b.Add(-time.Nanosecond).In(loc).Zone()
		_, after := b.In(loc).Zone()
		if wb, wa := b.Unix()+int64(before), b.Unix()+int64(after); u >= wb && u < wa {
			return b
		}
	}
	return i // no zone does this; keep time.Date's answer
}

// everySpec fires at whole multiples of every since the Unix epoch; loc is
// only the zone it is shown in.
type everySpec struct {
	every time.Duration
	loc   *time.Location
}

func (e everySpec) Next(t time.Time) time.Time {
	n := t.UnixNano()
	step := int64(e.every)
	next := n - n%step + step
	if n < 0 && n%step != 0 { // times before 1970 round toward zero above
		next -= step
	}
	return time.Unix(0, next).In(t.Location())
}
