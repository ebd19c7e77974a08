package cronspec

import (
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
	"time"
)

// WithOffset returns spec with every tick moved d later: its Next(t) is
// spec.Next(t-d) + d. A schedule's spread is applied this way (SpreadOffset),
// so the offset tick is the tick: the one locked, marked, shown by `next`.
// Offsets compose; d = 0 returns spec itself.
func WithOffset(spec Spec, d time.Duration) Spec {
	if o, ok := spec.(offsetSpec); ok {
		spec, d = o.spec, o.off+d
	}
	if d == 0 || spec == nil {
		return spec
	}
	return offsetSpec{spec: spec, off: d}
}

// Offset returns the offset WithOffset gave spec; 0 for any other.
func Offset(spec Spec) time.Duration {
	if o, ok := spec.(offsetSpec); ok {
		return o.off
	}
	return 0
}

// Base returns spec without the offset WithOffset gave it; spec itself
// for any other. The scheduler uses it to tell whether a compiled spec is
// a schedule's spec with its spread applied.
func Base(spec Spec) Spec {
	if o, ok := spec.(offsetSpec); ok {
		return o.spec
	}
	return spec
}

type offsetSpec struct {
	spec Spec
	off  time.Duration
}

func (o offsetSpec) Next(t time.Time) time.Time {
	n := o.spec.Next(t.Add(-o.off))
	if n.IsZero() { // never fires again
		return n
	}
	return n.Add(o.off)
}

// SpreadOffset is schedule id's stable offset in [0, spread), in whole
// seconds (0 when spread is under a second). It depends on nothing but id
// and spread, so every node, whatever else its config holds and however
// often it restarts, computes the same tick times: two nodes disagreeing
// would each lock a different tick and both run. SHA-256 rather than Go's
// map hash, which is seeded per process.
//
// Being a function of the id alone, it spreads like random throws: 1,000
// schedules over 600 s leave some seconds with 5 or 6 ticks where the mean
// is 1.7; any ten-second window stays within twice its mean.
func SpreadOffset(id string, spread time.Duration) time.Duration {
	n := uint64((spread + time.Second - 1) / time.Second) // whole seconds below spread
	if spread <= 0 || n <= 1 {
		return 0
	}
	sum := sha256.Sum256([]byte("bext-scheduler spread\x00" + id))
	return time.Duration(binary.BigEndian.Uint64(sum[:8])%n) * time.Second
}

// MinPeriod is the shortest time between two consecutive ticks of spec as
// its fields are written (daylight-saving shifts aside), or 0 when it
// cannot tell (a Spec Parse did not make, or one that never fires).
// Config refuses a spread that is not below it.
func MinPeriod(spec Spec) time.Duration {
	switch s := spec.(type) {
	case everySpec:
		return s.every
	case offsetSpec:
		return MinPeriod(s.spec)
	case calendarSpec: // the calendar only takes ticks away
		return MinPeriod(s.spec)
	case *cronSpec:
		return s.minPeriod()
	}
	return 0
}

// minPeriod works on the fields: the ticks of a day are the product
// hours × minutes × seconds, in order, so the shortest gap is between two
// seconds of one minute, across minutes, across hours, or from the last
// tick of a matching day to the first of the next one.
func (c *cronSpec) minPeriod() time.Duration {
	f := c.wall
	sec, min, hour := fieldSet(f.Second, 59), fieldSet(f.Minute, 59), fieldSet(f.Hour, 23)
	if len(sec) == 0 || len(min) == 0 || len(hour) == 0 {
		return 0
	}
	best := int64(-1)
	consider := func(gap int64) {
		if gap > 0 && (best < 0 || gap < best) {
			best = gap
		}
	}
	first := func(x []int64) int64 { return x[0] }
	last := func(x []int64) int64 { return x[len(x)-1] }
	consider(minGap(sec))
	spanS := last(sec) - first(sec)
	consider(60*minGap(min) - spanS)
	spanMS := 60*last(min) + last(sec) - 60*first(min) - first(sec)
	consider(3600*minGap(hour) - spanMS)
	spanDay := 3600*(last(hour)-first(hour)) + spanMS
	g := int64(0)
	if c.days != nil {
		g = c.days.minDayGap()
	} else {
		g = minDayGap(f.Dom, f.Month, f.Dow)
	}
	if g > 0 {
		consider(86400*g - spanDay)
	}
	if best < 0 {
		return 0
	}
	return time.Duration(best) * time.Second
}

// fieldSet lists the values set in a robfig field's bits, in [0, max].
func fieldSet(b uint64, max int) []int64 {
	var out []int64
	b &= 1<<(max+1) - 1
	for b != 0 {
		v := bits.TrailingZeros64(b)
		out = append(out, int64(v))
		b &^= 1 << v
	}
	return out
}

// minGap is the least difference of consecutive values; 0 for fewer than 2
// values (no gap inside the field: the next unit's is what counts).
func minGap(x []int64) int64 {
	var g int64
	for i := 1; i < len(x); i++ {
		if d := x[i] - x[i-1]; g == 0 || d < g {
			g = d
		}
	}
	return g
}

// starBit is robfig/cron's mark of a field written * or ?; with it, day of
// month and day of week must both match, without it either may.
const starBit = 1 << 63

// minDayGap is the least number of days between consecutive matching days
// over 28 years (the cycle of weekdays and leap years), 0 if fewer than two
// days match. It walks the calendar with integers: cheap enough for a
// config of thousands of schedules.
func minDayGap(dom, month, dow uint64) int64 {
	var best, day, prev int64 = 0, 0, -1
	wd := int64(time.Monday) // 2001-01-01
	for y := 2001; y < 2001+28; y++ {
		for m := time.January; m <= time.December; m++ {
			n := daysIn(m, y)
			for d := 1; d <= n; d++ {
				if month&(1<<uint(m)) != 0 && dayMatches(dom, dow, d, wd) {
					if prev >= 0 && (best == 0 || day-prev < best) {
						best = day - prev
						if best == 1 {
							return 1
						}
					}
					prev = day
				}
				day++
				wd = (wd + 1) % 7
			}
		}
	}
	return best
}

func dayMatches(dom, dow uint64, d int, wd int64) bool {
	domOK, dowOK := dom&(1<<uint(d)) != 0, dow&(1<<uint(wd)) != 0
	if dom&starBit != 0 || dow&starBit != 0 {
		return domOK && dowOK
	}
	return domOK || dowOK
}

func daysIn(m time.Month, y int) int {
	switch m {
	case time.February:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}

// ApplySpread returns spec moved by SpreadOffset(id, spread), unless spec
// already carries an offset: config resolves the offset into the Spec it
// hands over, so the scheduler can call this on every Schedule (for one
// built by hand with Spread set) without ever applying a spread twice. An
// offset that came out 0 is 0 again here.
func ApplySpread(spec Spec, id string, spread time.Duration) Spec {
	if spread <= 0 || spec == nil || Offset(spec) != 0 {
		return spec
	}
	return WithOffset(spec, SpreadOffset(id, spread))
}
