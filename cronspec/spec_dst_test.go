package cronspec

import (
	"sort"
	"testing"
	"time"
)

// TestNextDSTMatchesReference checks Next against the rule itself, worked
// out second by second over the two days around each change of Paris and
// New York in 2026: every real second is read on the wall clock; a * or
// stepped hour fires where the wall clock matches; a fixed hour fires where
// a matching wall-clock time is reached for the first time, or jumped over.
// Next must give the first such second after t for many t, fractional ones
// and the instants around every fire included.
func TestNextDSTMatchesReference(t *testing.T) {
	specs := []string{
		// fixed hours
		"30 2 * * *", "30 1 * * *", "0 2,3 * * *", "*/20 * 2 * * *", "0 30 2 * * *",
		"15,45 1-3 * * *", "@daily", "59 1 * * *", "0 3 * * *", "10 2 * * 0", "* 1 * * *",
		// * or stepped hours
		"30 * * * *", "0 */2 * * *", "*/30 * * * * *", "@hourly", "*/7 * * * *", "0 1-3/1 * * *",
		// L, W and #, on the days of the changes (Paris: the last Sundays
		// of March and October, the 29th the last but two of March; New
		// York: the second Sunday of March, the first of November, a
		// Sunday the 1st whose 1W is Monday the 2nd)
		"30 2 * * 0L", "30 1 * * SUN#1", "30 2 * * 0#2", "0 */2 * * 0L", "30 * * * SUN#1,SUN#2",
		"30 2 L-2 * *", "15 1 1W * *", "*/20 * 1 1W * *", "0 */2 L-2 * *", "30 2 LW * 0L", "30 1 L * SUN#4,SUN#5",
	}
	daysChecked := map[string]int{}
	defer func() {
		for _, expr := range specs {
			if spec, _ := Parse(expr, nil); spec.(*cronSpec).days != nil && daysChecked[expr] < 20 {
				t.Errorf("%q: only %d starts checked", expr, daysChecked[expr])
			}
		}
	}()
	for _, zc := range []struct {
		zone   string
		change string // the instant of the change
	}{
		{"Europe/Paris", "2026-03-29T01:00:00Z"},
		{"Europe/Paris", "2026-10-25T01:00:00Z"},
		{"America/New_York", "2026-03-08T07:00:00Z"},
		{"America/New_York", "2026-11-01T06:00:00Z"},
	} {
		loc, err := time.LoadLocation(zc.zone)
		if err != nil {
			t.Fatal(err)
		}
		change, _ := time.Parse(time.RFC3339, zc.change)
		from, to := change.Add(-26*time.Hour), change.Add(26*time.Hour)
		n := int(to.Sub(from) / time.Second)
		walls := make([]int64, n) // the wall clock of each second, as Unix seconds
		fields := make([]wallFields, n)
		for k := range n {
			i := from.Add(time.Duration(k) * time.Second).In(loc)
			_, off := i.Zone()
			walls[k] = i.Unix() + int64(off)
			fields[k] = fieldsOf(walls[k])
		}
		for _, expr := range specs {
			spec, err := Parse(expr, loc)
			if err != nil {
				t.Fatal(err)
			}
			c := spec.(*cronSpec)
			var fires []time.Time
			maxWall := walls[0] - 1
			for k := range n {
				at := from.Add(time.Duration(k) * time.Second)
				switch w := walls[k]; {
				case !c.fixedHour:
					if c.matches(fields[k]) {
						fires = append(fires, at)
					}
				case w <= maxWall: // a repeat: ran at its first occurrence
				case w-maxWall > 1 && k > 0: // a jump: anything skipped runs now
					for x := maxWall + 1; x <= w; x++ {
						if c.matches(fieldsOf(x)) {
							fires = append(fires, at)
							break
						}
					}
				default:
					if c.matches(fields[k]) {
						fires = append(fires, at)
					}
				}
				maxWall = max(maxWall, walls[k])
			}
			var starts []time.Time
			for s := from; s.Before(to); s = s.Add(4*time.Minute + 250*time.Millisecond) {
				starts = append(starts, s)
			}
			for j, f := range fires {
				if len(fires) > 500 && j%7 != 0 { // every-second specs: a sample
					continue
				}
				starts = append(starts, f.Add(-time.Second), f.Add(-time.Nanosecond), f, f.Add(500*time.Millisecond))
			}
			checked := 0
			for _, s := range starts {
				j := sort.Search(len(fires), func(j int) bool { return fires[j].After(s) })
				if j == len(fires) || s.Before(from) {
					continue
				}
				want := fires[j]
				checked++
				if got := spec.Next(s); !got.Equal(want) {
					t.Errorf("%s %q: Next(%s) = %s, want %s", zc.zone, expr,
						s.In(loc).Format(time.RFC3339Nano), got.In(loc).Format(time.RFC3339), want.In(loc).Format(time.RFC3339))
					break
				}
			}
			if c.days != nil {
				daysChecked[expr] += checked // most fire on some of the changes only
			} else if checked < 100 {
				t.Errorf("%s %q: only %d starts checked", zc.zone, expr, checked)
			}
		}
	}
}

type wallFields struct{ sec, min, hour, dom, month, dow, year int }

func fieldsOf(wall int64) wallFields {
	w := time.Unix(wall, 0).UTC()
	return wallFields{w.Second(), w.Minute(), w.Hour(), w.Day(), int(w.Month()), int(w.Weekday()), w.Year()}
}

// matches reads the fields the way robfig/cron does, and the days of L,
// W and # as refDay does.
func (c *cronSpec) matches(f wallFields) bool {
	s := c.wall
	day := dayMatches(s.Dom, s.Dow, f.dom, int64(f.dow))
	if c.days != nil {
		day = c.days.refDay(f.year, time.Month(f.month), f.dom)
	}
	return s.Second&(1<<f.sec) != 0 && s.Minute&(1<<f.min) != 0 && s.Hour&(1<<f.hour) != 0 &&
		s.Month&(1<<f.month) != 0 && day
}
