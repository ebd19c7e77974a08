package service

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Schedules hands the scheduler the config's catch-up window and spread,
// with the spread offset already in the Spec.
func TestSchedulesCarryCatchupAndSpread(t *testing.T) {
	cfg, err := config.Parse([]byte(`
[[scheduled]]
id = "plain"
cron = "@hourly"
command = ["x"]

[[scheduled]]
id = "never-late"
cron = "@hourly"
catchup_window = "0s"
command = ["x"]

[[scheduled]]
id = "spread"
cron = "@hourly"
catchup_window = "10m"
spread = "10m"
command = ["x"]
`), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]scheduler.Schedule{}
	for _, s := range Schedules(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil) {
		got[s.ID] = s
	}
	off := cronspec.SpreadOffset("spread", 10*time.Minute)
	for _, tc := range []struct {
		id            string
		catchup, sprd time.Duration
		offset        time.Duration
	}{
		{"plain", 0, 0, 0},
		{"never-late", scheduler.NoCatchup, 0, 0},
		{"spread", 10 * time.Minute, 10 * time.Minute, off},
	} {
		s := got[tc.id]
		if s.CatchupWindow != tc.catchup || s.Spread != tc.sprd || cronspec.Offset(s.Spec) != tc.offset {
			t.Errorf("%s: catchup %v spread %v offset %v, want %v %v %v", tc.id,
				s.CatchupWindow, s.Spread, cronspec.Offset(s.Spec), tc.catchup, tc.sprd, tc.offset)
		}
	}
	from := time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC)
	if next := got["spread"].Spec.Next(from); !next.Equal(time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC).Add(off)) {
		t.Errorf("spread ticks at %v, want 01:00 + %v", next, off)
	}
}
