package config

import (
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
)

// except, start and end: read as strings or TOML dates, applied to the
// schedule's Spec in its zone, and in a canonical calendar text.
func TestCalendarKeys(t *testing.T) {
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
[[scheduled]]
id = "holidays"
cron = "0 3 * * *"
timezone = "Europe/Paris"
except = ["2026-12-25", "*-01-01", 2026-12-26]
start = "2026-12-01T00:00:00+01:00"
end = 2027-06-30T00:00:00Z
command = ["x"]

[[scheduled]]
id = "last-day"
cron = "0 18 LW * *"
command = ["x"]

[[scheduled]]
id = "plain"
cron = "0 3 * * *"
command = ["x"]
`))
	s := schedule(t, c, "holidays")
	if strings.Join(s.Except, ",") != "2026-12-25,*-01-01,2026-12-26" {
		t.Errorf("except = %q", s.Except)
	}
	if !s.Start.Equal(utc("2026-11-30T23:00:00Z")) || !s.End.Equal(utc("2027-06-30T00:00:00Z")) {
		t.Errorf("start, end = %v, %v", s.Start, s.End)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	var got []string
	for at := utc("2026-12-23T12:00:00Z"); len(got) < 4; {
		at = s.Spec.Next(at)
		got = append(got, at.In(paris).Format("01-02"))
	}
	if strings.Join(got, " ") != "12-24 12-27 12-28 12-29" {
		t.Errorf("ticks around Christmas: %v", got)
	}
	if n := s.Spec.Next(utc("2026-01-01T00:00:00Z")); !n.Equal(utc("2026-12-01T02:00:00Z")) {
		t.Errorf("first tick %v, want the first after start", n)
	}
	if n := s.Spec.Next(utc("2027-06-29T12:00:00Z")); !n.IsZero() {
		t.Errorf("tick %v after end", n)
	}
	if cronspec.CalendarText(s.Spec) == "" || cronspec.CalendarText(schedule(t, c, "plain").Spec) != "" {
		t.Error("calendar text: want one for holidays only")
	}
	if n := schedule(t, c, "last-day").Spec.Next(utc("2026-05-01T00:00:00Z")); !n.Equal(utc("2026-05-29T18:00:00Z")) {
		t.Errorf("LW in May 2026 (the 31st a Sunday): %v", n)
	}
}

// A calendar and a spread: the offset stays outside, the calendar judges
// the tick as the cron gives it.
func TestCalendarKeysWithSpread(t *testing.T) {
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
[[scheduled]]
id = "a-day"
cron = "@daily"
spread = "59m"
except = ["2026-12-25"]
command = ["x"]
`))
	s := schedule(t, c, "a-day")
	if s.Offset == 0 || cronspec.Offset(s.Spec) != s.Offset {
		t.Fatalf("offset %v, spec offset %v", s.Offset, cronspec.Offset(s.Spec))
	}
	if n := s.Spec.Next(utc("2026-12-24T12:00:00Z")); !n.Equal(utc("2026-12-26T00:00:00Z").Add(s.Offset)) {
		t.Errorf("next after the 24th: %v", n)
	}
}

// Every bad value is reported, naming the schedule and the entry, at its
// line.
func TestCalendarKeyProblems(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		line           int
	}{
		{"bad month", job + "command = [\"x\"]\nexcept = [\"2026-13-01\"]\n", `schedule "j": except entry "2026-13-01": no month 13`, 5},
		{"no such day", job + "command = [\"x\"]\nexcept = [\"2026-02-01\", \"*-02-30\"]\n", `schedule "j": except entry "*-02-30": February has no day 30`, 5},
		{"not a date", job + "command = [\"x\"]\nexcept = [\"christmas\"]\n", `schedule "j": except entry "christmas": want a date YYYY-MM-DD, or *-MM-DD for every year`, 5},
		{"not an array", job + "command = [\"x\"]\nexcept = \"2026-12-25\"\n", `schedule "j": except: want an array of dates`, 5},
		{"a number in it", job + "command = [\"x\"]\nexcept = [20261225]\n", `schedule "j": except: want dates`, 5},
		{"bad start", job + "command = [\"x\"]\nstart = \"tomorrow\"\n", `schedule "j": start: "tomorrow" is not an RFC 3339 time`, 5},
		{"start with no offset", job + "command = [\"x\"]\nstart = 2026-01-01T00:00:00\n", `schedule "j": start: 2026-01-01T00:00:00 has no offset`, 5},
		{"end a number", job + "command = [\"x\"]\nend = 5\n", `schedule "j": end: want an RFC 3339 time, got an integer`, 5},
		{"end before start", job + "command = [\"x\"]\nstart = \"2026-02-01T00:00:00Z\"\nend = \"2026-01-01T00:00:00Z\"\n", `schedule "j": end 2026-01-01T00:00:00Z is before start 2026-02-01T00:00:00Z`, 6},
		{"every tick excepted", "[[scheduled]]\nid = \"x\"\ncron = \"0 0 25 12 *\"\ncommand = [\"x\"]\nexcept = [\"*-12-25\"]\n", `schedule "x": cron "0 0 25 12 *": no tick in the next five years once except, start and end are applied`, 3},
		{"W in a list", "[[scheduled]]\nid = \"w\"\ncron = \"0 0 1,15W * *\"\ncommand = [\"x\"]\n", `schedule "w": bad cron "0 0 1,15W * *": day-of-month field "1,15W": W stands alone`, 3},
		{"# out of range", "[[scheduled]]\nid = \"w\"\ncron = \"0 0 * * MON#6\"\ncommand = [\"x\"]\n", `day-of-week field "MON#6"`, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, tc.in, tc.want, tc.line)
		})
	}
}

// An end in the past is no error: the schedule fires no more.
func TestCalendarEndedIsValid(t *testing.T) {
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
[[scheduled]]
id = "over"
cron = "@hourly"
end = "2020-01-01T00:00:00Z"
command = ["x"]
`))
	if n := schedule(t, c, "over").Spec.Next(time.Now()); !n.IsZero() {
		t.Errorf("an ended schedule ticks at %v", n)
	}
}

// The keys in an included file (the full path: the fast one leaves them
// to it).
func TestCalendarKeysInclude(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "jobs.toml", "[[scheduled]]\nid = \"inc\"\ncron = \"0 9 * * MON#1\"\nexcept = [\"*-01-05\"]\ncommand = [\"x\"]\n")
	main := write(t, dir, "main.toml", "include = [\"jobs.toml\"]\n")
	c := mustLoad(t, main)
	// The first Monday of January 2026 is the 5th: excepted.
	if n := schedule(t, c, "inc").Spec.Next(utc("2026-01-01T00:00:00Z")); !n.Equal(utc("2026-02-02T09:00:00Z")) {
		t.Errorf("first tick %v, want Monday 2 February", n)
	}
}

// A config built by hand is checked alike.
func TestCalendarValidateByHand(t *testing.T) {
	c := Default()
	c.NodeID = "n"
	c.Scheduled = []Schedule{{ID: "a", Cron: "@hourly", Command: []string{"x"}, Except: []string{"2026-02-29", "2026-12-25"}}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `schedule "a": except entry "2026-02-29": February has no day 29`) {
		t.Errorf("Validate = %v", err)
	}
}
