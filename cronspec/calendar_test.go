package cronspec_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
)

func mustCalendar(t *testing.T, expr string, loc *time.Location, cal cronspec.Calendar) cronspec.Spec {
	t.Helper()
	spec, err := cronspec.Parse(expr, loc)
	if err != nil {
		t.Fatal(err)
	}
	if spec, err = cronspec.WithCalendar(spec, cal); err != nil {
		t.Fatal(err)
	}
	return spec
}

func ticks(spec cronspec.Spec, from time.Time, n int) []string {
	var out []string
	for t := from; len(out) < n; {
		if t = spec.Next(t); t.IsZero() {
			break
		}
		out = append(out, t.UTC().Format(time.RFC3339))
	}
	return out
}

// An excepted date has no tick, in the schedule's zone, once or every
// year; the ticks on each side are kept.
func TestCalendarExcept(t *testing.T) {
	paris := mustLoc(t, "Europe/Paris")
	spec := mustCalendar(t, "0 3 * * *", paris, cronspec.Calendar{Except: []string{"2026-12-25", "*-01-01"}})
	got := ticks(spec, mustTime(t, "2026-12-24T00:00:00Z"), 3)
	want := []string{"2026-12-24T02:00:00Z", "2026-12-26T02:00:00Z", "2026-12-27T02:00:00Z"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("around Christmas: %v, want %v", got, want)
	}
	// 2027-01-01 and 2028-01-01: the every-year entry.
	for _, from := range []string{"2026-12-31T12:00:00Z", "2027-12-31T12:00:00Z"} {
		at := mustTime(t, from)
		if n := spec.Next(at); n.In(paris).Day() != 2 {
			t.Errorf("Next(%s) = %s, want the 2nd of January", from, n.In(paris))
		}
	}
	// The zone decides the date: 03:00 in Paris on the 25th is 02:00Z.
	// The same spec in UTC excepts the UTC date.
	utc := mustCalendar(t, "0 0 * * *", nil, cronspec.Calendar{Except: []string{"2026-12-25"}})
	if n := utc.Next(mustTime(t, "2026-12-24T12:00:00Z")); !n.Equal(mustTime(t, "2026-12-26T00:00:00Z")) {
		t.Errorf("UTC: %v, want the 26th", n)
	}
	// A spec that fires every second passes over the whole day at once.
	sec := mustCalendar(t, "* * * * * *", paris, cronspec.Calendar{Except: []string{"2026-12-25"}})
	if n := sec.Next(mustTime(t, "2026-12-24T22:59:59Z")); !n.Equal(mustTime(t, "2026-12-25T23:00:00Z")) {
		t.Errorf("every second: %v, want the first second of the 26th in Paris", n)
	}
	// Every tick excepted: it never fires, and Next says so.
	never := mustCalendar(t, "0 0 25 12 *", nil, cronspec.Calendar{Except: []string{"*-12-25"}})
	if n := never.Next(mustTime(t, "2026-01-01T00:00:00Z")); !n.IsZero() {
		t.Errorf("all ticks excepted: %v, want none", n)
	}
}

// Start and end bound the ticks, both included.
func TestCalendarStartEnd(t *testing.T) {
	spec := mustCalendar(t, "0 * * * *", nil, cronspec.Calendar{
		Start: mustTime(t, "2026-05-01T10:00:00+02:00"), // 08:00Z
		End:   mustTime(t, "2026-05-01T11:00:00Z"),
	})
	got := ticks(spec, mustTime(t, "2026-04-01T00:00:00Z"), 10)
	want := []string{"2026-05-01T08:00:00Z", "2026-05-01T09:00:00Z", "2026-05-01T10:00:00Z", "2026-05-01T11:00:00Z"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ticks %v, want %v", got, want)
	}
	if !cronspec.Ended(spec, mustTime(t, "2026-05-01T11:00:01Z")) || cronspec.Ended(spec, mustTime(t, "2026-05-01T10:59:00Z")) {
		t.Error("Ended does not follow end")
	}
	if p := cronspec.Prev(spec, mustTime(t, "2026-06-01T00:00:00Z"), 60*24*time.Hour); !p.Equal(mustTime(t, "2026-05-01T11:00:00Z")) {
		t.Errorf("Prev after the end: %v, want the last tick", p)
	}
}

// The calendar judges a tick before its spread offset: 23:55 on the 24th,
// fired ten minutes later on the 25th, is the 24th's.
func TestCalendarBeforeTheOffset(t *testing.T) {
	spec, err := cronspec.Parse("55 23 * * *", nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err = cronspec.WithCalendar(cronspec.WithOffset(spec, 10*time.Minute), cronspec.Calendar{Except: []string{"2026-12-25"}})
	if err != nil {
		t.Fatal(err)
	}
	if cronspec.Offset(spec) != 10*time.Minute {
		t.Fatalf("offset %v, want 10m kept outside the calendar", cronspec.Offset(spec))
	}
	got := ticks(spec, mustTime(t, "2026-12-24T12:00:00Z"), 2)
	want := []string{"2026-12-25T00:05:00Z", "2026-12-27T00:05:00Z"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ticks %v, want %v", got, want)
	}
	all, excepted, ok := cronspec.Excepted(spec)
	if !ok {
		t.Fatal("Excepted: no except dates")
	}
	lifted := ticks(all, mustTime(t, "2026-12-24T12:00:00Z"), 3)
	if w := []string{"2026-12-25T00:05:00Z", "2026-12-26T00:05:00Z", "2026-12-27T00:05:00Z"}; strings.Join(lifted, " ") != strings.Join(w, " ") {
		t.Fatalf("lifted ticks %v, want %v", lifted, w)
	}
	for i, w := range []bool{false, true, false} {
		if got := excepted(mustTime(t, lifted[i])); got != w {
			t.Errorf("excepted(%s) = %v, want %v", lifted[i], got, w)
		}
	}
}

func TestCalendarErrors(t *testing.T) {
	for _, e := range []string{"2026-13-01", "2026-02-30", "*-02-30", "26-12-25", "2026/12/25", "", "*-2-1", "2026-12-25T00:00:00Z", "*-00-10", "x-01-01", "2026-04-31"} {
		err := cronspec.ParseExcept(e)
		if err == nil || !errors.Is(err, cronspec.ErrCalendar) || !strings.Contains(err.Error(), "\""+e+"\"") {
			t.Errorf("ParseExcept(%q) = %v, want an ErrCalendar naming it", e, err)
		}
	}
	for _, e := range []string{"2028-02-29", "*-02-29", "*-12-31", "1999-01-01"} {
		if err := cronspec.ParseExcept(e); err != nil {
			t.Errorf("ParseExcept(%q): %v", e, err)
		}
	}
	spec, _ := cronspec.Parse("0 3 * * *", nil)
	_, err := cronspec.WithCalendar(spec, cronspec.Calendar{Start: mustTime(t, "2026-02-01T00:00:00Z"), End: mustTime(t, "2026-01-01T00:00:00Z")})
	if !errors.Is(err, cronspec.ErrCalendar) {
		t.Errorf("end before start: %v", err)
	}
}

// The same calendar written otherwise is one value with one text: a
// reload keeps the schedule, and every node hashes it alike.
func TestCalendarInternedAndCanonical(t *testing.T) {
	a := mustCalendar(t, "0 3 * * *", nil, cronspec.Calendar{Except: []string{"2026-12-25", "*-01-01"}, Start: mustTime(t, "2026-01-01T01:00:00+01:00")})
	b := mustCalendar(t, "0 3 * * *", nil, cronspec.Calendar{Except: []string{"*-01-01", "2026-12-25", "*-01-01"}, Start: mustTime(t, "2026-01-01T00:00:00Z")})
	if a != b {
		t.Error("two equal calendars are two values")
	}
	want := "except=*-01-01,2026-12-25;start=2026-01-01T00:00:00Z;end="
	if got := cronspec.CalendarText(a); got != want {
		t.Errorf("CalendarText = %q, want %q", got, want)
	}
	plain, _ := cronspec.Parse("0 3 * * *", nil)
	if got, _ := cronspec.WithCalendar(plain, cronspec.Calendar{}); got != plain || cronspec.CalendarText(plain) != "" {
		t.Error("an empty calendar changes the spec")
	}
}

// Prev agrees with Next over excepted dates and bounds, with L, W and #
// among the specs, in Paris and New York across their DST changes.
func TestCalendarPrevNextRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	exprs := []string{"0 3 * * *", "30 2 * * *", "*/30 * * * *", "0 12 L * *", "30 2 * * 0L", "0 9 15W * *", "0 1 * * SUN#1,SUN#2", "@every 7h"}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, zone := range []string{"Europe/Paris", "America/New_York"} {
		loc := mustLoc(t, zone)
		for _, expr := range exprs {
			cal := cronspec.Calendar{
				Except: []string{"*-03-29", "*-03-08", "*-10-25", "*-11-01", "2026-03-31", "*-12-25"},
				Start:  start.Add(24 * time.Hour), End: start.AddDate(3, 0, 0),
			}
			spec := mustCalendar(t, expr, loc, cal)
			for range 100 {
				at := start.Add(time.Duration(r.Int64N(int64(3 * 365 * 24 * time.Hour))))
				n := spec.Next(at)
				if n.IsZero() {
					continue // past the end
				}
				if d := n.In(loc).Format("01-02"); d == "03-29" || d == "03-08" || d == "10-25" || d == "11-01" || d == "12-25" {
					t.Fatalf("%s %q: tick %v on an excepted date", zone, expr, n.In(loc))
				}
				const limit = 400 * 24 * time.Hour
				if p := cronspec.Prev(spec, n, limit); !p.Equal(n) {
					t.Fatalf("%s %q: Prev(Next(%v) = %v) = %v", zone, expr, at, n, p)
				}
				if p := cronspec.Prev(spec, n.Add(-time.Nanosecond), limit); !p.IsZero() && (!spec.Next(p).Equal(n) || p.After(at)) {
					t.Fatalf("%s %q: Prev before %v = %v, whose Next is %v", zone, expr, n, p, spec.Next(p))
				}
			}
		}
	}
}
