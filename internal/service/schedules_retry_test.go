package service

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/config"
)

// Schedules hands the scheduler each schedule's retries, retry backoff and
// pause_after_failures as the config says, zeros when unset.
func TestSchedulesCarryRetriesAndPauseAfterFailures(t *testing.T) {
	cfg, err := config.Parse([]byte(`
[[scheduled]]
id = "retrying"
cron = "@hourly"
retries = 3
retry_backoff = "7s"
pause_after_failures = 4
command = ["x"]

[[scheduled]]
id = "plain"
cron = "@hourly"
command = ["x"]
`), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	out := Schedules(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if len(out) != 2 {
		t.Fatalf("%d schedules", len(out))
	}
	if r := out[0]; r.ID != "retrying" || r.Retries != 3 || r.RetryBackoff != 7*time.Second || r.PauseAfterFailures != 4 {
		t.Errorf("retrying: %s retries %d backoff %v pause after %d", r.ID, r.Retries, r.RetryBackoff, r.PauseAfterFailures)
	}
	if p := out[1]; p.Retries != 0 || p.RetryBackoff != 0 || p.PauseAfterFailures != 0 {
		t.Errorf("plain: retries %d backoff %v pause after %d, want zeros", p.Retries, p.RetryBackoff, p.PauseAfterFailures)
	}
}
