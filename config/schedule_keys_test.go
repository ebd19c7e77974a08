package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
)

// The [[scheduled]] keys catchup_window and spread, and
// the cron rules config enforces (@every, CRON_TZ= against timezone).

func TestCatchupWindowAndSpread(t *testing.T) {
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
[[scheduled]]
id = "unset"
cron = "@hourly"
command = ["x"]

[[scheduled]]
id = "never-late"
cron = "@hourly"
catchup_window = "0s"
command = ["x"]

[[scheduled]]
id = "a-day"
cron = "@weekly"
catchup_window = "24h"
spread = "59m"
command = ["x"]
`))
	for _, tc := range []struct {
		id      string
		catchup time.Duration
		spread  time.Duration
	}{
		{"unset", 0, 0},              // the scheduler's default: one period
		{"never-late", NoCatchup, 0}, // "0s" is not "unset"
		{"a-day", 24 * time.Hour, 59 * time.Minute},
	} {
		s := schedule(t, c, tc.id)
		if s.Catchup() != tc.catchup || s.Spread.Duration != tc.spread {
			t.Errorf("%s: catchup %v spread %v, want %v %v", tc.id, s.Catchup(), s.Spread.Duration, tc.catchup, tc.spread)
		}
		if want := cronspec.SpreadOffset(tc.id, tc.spread); s.Offset != want || cronspec.Offset(s.Spec) != want {
			t.Errorf("%s: offset %v, spec offset %v, want %v", tc.id, s.Offset, cronspec.Offset(s.Spec), want)
		}
	}
	// The offset is in the ticks: @weekly is Sunday 00:00 UTC, plus it.
	s := schedule(t, c, "a-day")
	if s.Offset == 0 {
		t.Fatal("a-day drew offset 0: pick another id so the test can tell")
	}
	want := utc("2026-01-11T00:00:00Z").Add(s.Offset)
	if got := s.Spec.Next(utc("2026-01-10T00:00:00Z")); !got.Equal(want) {
		t.Errorf("a-day next = %v, want %v", got, want)
	}
}

func TestScheduleKeyProblems(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		line           int
	}{
		{"negative catchup_window", job + "command = [\"x\"]\ncatchup_window = \"-1m\"\n", `schedule "j": catchup_window: negative duration`, 5},
		{"bad catchup_window", job + "command = [\"x\"]\ncatchup_window = \"an hour\"\n", `schedule "j": catchup_window: bad duration`, 5},
		{"catchup_window not a string", job + "command = [\"x\"]\ncatchup_window = 60\n", `catchup_window: want a duration string`, 5},
		{"negative spread", job + "command = [\"x\"]\nspread = \"-1m\"\n", `schedule "j": spread: negative duration`, 5},
		{"spread of a whole period", job + "command = [\"x\"]\nspread = \"1h\"\n", `schedule "j": spread 1h0m0s is not below the schedule's shortest time between ticks (1h0m0s)`, 5},
		{"spread over the period", "[[scheduled]]\nid = \"k\"\ncron = \"*/10 * * * * *\"\ncommand = [\"x\"]\nspread = \"30s\"\n", `schedule "k": spread 30s is not below`, 5},
		{"spread over an @every", "[[scheduled]]\nid = \"k\"\ncron = \"@every 90s\"\ncommand = [\"x\"]\nspread = \"2m\"\n", `(1m30s)`, 5},
		{"@every 0s", "[[scheduled]]\nid = \"k\"\ncommand = [\"x\"]\ncron = \"@every 0s\"\n", `bad cron "@every 0s": @every 0s: the interval must be at least 1s`, 4},
		{"@every -5m", "[[scheduled]]\nid = \"k\"\ncommand = [\"x\"]\ncron = \"@every -5m\"\n", `at least 1s`, 4},
		{"@every 1500ms", "[[scheduled]]\nid = \"k\"\ncommand = [\"x\"]\ncron = \"@every 1500ms\"\n", `must be whole seconds`, 4},
		{"CRON_TZ against timezone", "[[scheduled]]\nid = \"k\"\ncommand = [\"x\"]\ntimezone = \"Europe/Paris\"\ncron = \"CRON_TZ=America/New_York 0 9 * * *\"\n",
			`schedule "k": cron's time zone "America/New_York" disagrees with timezone "Europe/Paris"`, 5},
		{"TZ= against timezone", "[[scheduled]]\nid = \"k\"\ncommand = [\"x\"]\ncron = \"TZ=UTC 0 9 * * *\"\ntimezone = \"Asia/Tokyo\"\n",
			`disagrees with timezone "Asia/Tokyo"`, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, tc.in, tc.want, tc.line)
		})
	}
}

// Every problem with the new keys is reported, alongside the others.
func TestScheduleKeyProblemsAllAtOnce(t *testing.T) {
	in := `[[scheduled]]
id = "a"
cron = "@every 1500ms"
command = ["x"]
catchup_window = "-1s"
[[scheduled]]
id = "b"
cron = "@hourly"
spread = "2h"
catchup_window = "soon"
command = ["x"]
`
	_, err := Parse([]byte(in), "t.toml")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want *Error, got %v", err)
	}
	for _, want := range []string{"t.toml:3:", "t.toml:5:", "t.toml:9:", "t.toml:10:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no problem at %s; got:\n%v", want, err)
		}
	}
}

func TestValidateByHandNewKeys(t *testing.T) {
	c := Default()
	c.NodeID = "n"
	neg := Duration{-time.Second}
	c.Scheduled = []Schedule{{ID: "a", Cron: "@hourly", Command: []string{"x"}, CatchupWindow: &neg, Spread: Duration{-time.Minute}}}
	err := c.Validate()
	for _, want := range []string{"catchup_window: negative", "spread: negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want a problem with %q", err, want)
		}
	}
}
