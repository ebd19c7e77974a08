package service

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"unsafe"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/jobs"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Schedules whose jobs are equal share one job value; a job that differs
// in any field the config sets gets its own.
func TestSchedulesShareEqualJobs(t *testing.T) {
	cfg, err := config.Parse([]byte(`
[[scheduled]]
id = "a"
cron = "@hourly"
command = ["/bin/echo", "x"]

[[scheduled]]
id = "same"
cron = "@hourly"
command = ["/bin/echo", "x"]

[[scheduled]]
id = "argv"
cron = "@hourly"
command = ["/bin/echo", "y"]

[[scheduled]]
id = "argv-split"
cron = "@hourly"
command = ["/bin/echo x"]

[[scheduled]]
id = "dir"
cron = "@hourly"
command = ["/bin/echo", "x"]
dir = "/tmp"

[[scheduled]]
id = "env"
cron = "@hourly"
command = ["/bin/echo", "x"]
env = { A = "1" }

[[scheduled]]
id = "env-value"
cron = "@hourly"
command = ["/bin/echo", "x"]
env = { A = "2" }

[[scheduled]]
id = "env-clean"
cron = "@hourly"
command = ["/bin/echo", "x"]
env_mode = "clean"

[[scheduled]]
id = "local"
cron = "@hourly"
hint = "node_local"
command = ["/bin/echo", "x"]

[[scheduled]]
id = "http"
cron = "@hourly"
http = { url = "http://example.com/a" }

[[scheduled]]
id = "http-same"
cron = "@hourly"
http = { url = "http://example.com/a" }

[[scheduled]]
id = "http-body"
cron = "@hourly"
http = { url = "http://example.com/a", body = "b" }
`), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]any{}
	for _, s := range Schedules(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil) {
		byID[s.ID] = s.Job
	}
	if byID["a"] != byID["same"] || byID["http"] != byID["http-same"] {
		t.Error("equal jobs are not shared")
	}
	distinct := []string{"a", "argv", "argv-split", "dir", "env", "env-value", "env-clean", "local", "http", "http-body"}
	for i, x := range distinct {
		for _, y := range distinct[i+1:] {
			if byID[x] == byID[y] {
				t.Errorf("%s and %s share a job: %+v", x, y, byID[x])
			}
		}
	}
	if c := byID["local"].(*jobs.Command); c.KillGrace != 0 || byID["a"].(*jobs.Command).KillGrace == 0 {
		t.Errorf("kill grace: node_local %v, a %v", c.KillGrace, byID["a"].(*jobs.Command).KillGrace)
	}
}

// CompactIDs leaves every id as it was, each a slice of one string.
func TestCompactIDs(t *testing.T) {
	ids := []string{"a", "", "bc", "a", "schedule-long-id"}
	var scheds []scheduler.Schedule
	for _, id := range ids {
		scheds = append(scheds, scheduler.Schedule{ID: strings.Clone(id)})
	}
	CompactIDs(scheds)
	for i, s := range scheds {
		if s.ID != ids[i] {
			t.Errorf("id %d: %q, want %q", i, s.ID, ids[i])
		}
	}
	if unsafe.Pointer(unsafe.StringData(scheds[2].ID)) != unsafe.Add(unsafe.Pointer(unsafe.StringData(scheds[0].ID)), 1) {
		t.Error("the ids are not one string")
	}
}
