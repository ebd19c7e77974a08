package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
)

// write creates name (with parent directories) under dir.
func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustLoad(t *testing.T, path string) *Config {
	t.Helper()
	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%s):\n%v", path, err)
	}
	return c
}

func schedule(t *testing.T, c *Config, id string) *Schedule {
	t.Helper()
	for i := range c.Scheduled {
		if c.Scheduled[i].ID == id {
			return &c.Scheduled[i]
		}
	}
	t.Fatalf("no schedule %q", id)
	return nil
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// The DESIGN.md sample, verbatim, with its jobs/ include directory.
func TestLoadDesignSample(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://app:s3cret@redis.internal:6379/0")
	t.Setenv("HOOK_TOKEN", "tok")
	c := mustLoad(t, "testdata/bext-sample.toml")

	if c.NodeID != "node-a" || c.ShutdownGrace.Duration != 30*time.Second {
		t.Errorf("node_id, shutdown_grace = %q, %v", c.NodeID, c.ShutdownGrace)
	}
	if !filepath.IsAbs(c.Path) || !strings.HasSuffix(c.Path, "bext-sample.toml") {
		t.Errorf("Path = %q, want the absolute path", c.Path)
	}
	if c.HTTP.Listen != "127.0.0.1:9464" || !c.HTTP.Enabled() {
		t.Errorf("http = %+v", c.HTTP)
	}
	l := c.Locking
	if l.Backend != BackendRedis || l.SafetyMargin.Duration != 5*time.Second || l.MaxClockSkew.Duration != time.Second {
		t.Errorf("locking = %+v", l)
	}
	if l.Redis.URL != "redis://app:s3cret@redis.internal:6379/0" || l.Redis.KeyPrefix != "bext:lock:" ||
		l.Redis.OpTimeout.Duration != 2*time.Second {
		t.Errorf("redis: url %q prefix %q timeout %v", l.Redis.URL, l.Redis.KeyPrefix, l.Redis.OpTimeout)
	}
	if l.PG.URL != "postgres://postgres@localhost/bext" || l.PG.MaxSessions != 16 || l.PG.Namespace != "bext" {
		t.Errorf("pg = %v", l.PG)
	}
	if len(c.Scheduled) != 3 {
		t.Fatalf("%d schedules, want 1 + 2 included", len(c.Scheduled))
	}

	s := schedule(t, c, "nightly-report")
	if s.File != "testdata/bext-sample.toml" || s.Line != 16 {
		t.Errorf("declared at %s:%d, want testdata/bext-sample.toml:16", s.File, s.Line)
	}
	if s.Plugin != "@bext/cron" || s.HintValue != hints.RequireGlobal || s.Overlap != OverlapSkip ||
		s.ExpectedRuntime.Duration != 2*time.Minute || s.Jitter.Duration != 30*time.Second ||
		s.Timeout.Duration != 10*time.Minute || strings.Join(s.Command, " ") != "/usr/local/bin/report --daily" {
		t.Errorf("nightly-report = %+v", s)
	}
	if s.Location.String() != "Europe/Paris" {
		t.Errorf("location %v", s.Location)
	}
	if s.CatchupWindow == nil || s.CatchupWindow.Duration != time.Hour || s.Catchup() != time.Hour {
		t.Errorf("catchup_window = %v", s.CatchupWindow)
	}
	// spread = "10m" gives nightly-report its own offset (scheduler's
	// SpreadOffset pins it): 03:00 in Paris in winter is 02:00 UTC, + 3m47s.
	if s.Spread.Duration != 10*time.Minute || s.Offset != 3*time.Minute+47*time.Second {
		t.Errorf("spread %v, offset %v", s.Spread, s.Offset)
	}
	if got := s.Spec.Next(utc("2026-01-10T00:00:00Z")); !got.Equal(utc("2026-01-10T02:03:47Z")) {
		t.Errorf("next = %v", got)
	}

	inc := schedule(t, c, "cleanup-tmp")
	if inc.File != filepath.Join("testdata", "jobs", "cleanup.toml") || inc.Line != 2 {
		t.Errorf("included schedule at %s:%d", inc.File, inc.Line)
	}
	if inc.HintValue != hints.NodeLocal || inc.ExpectedRuntime.Duration != time.Minute || inc.Location != time.UTC {
		t.Errorf("cleanup-tmp = %+v", inc)
	}
	hook := schedule(t, c, "ping-hook")
	if hook.HTTP == nil || hook.HTTP.Headers["Authorization"] != "Bearer tok" || hook.HTTP.Method != "GET" ||
		hook.HTTP.Timeout.Duration != 10*time.Second {
		t.Errorf("ping-hook http = %+v", hook.HTTP)
	}
	if got := hook.Spec.Next(utc("2026-01-10T00:01:00Z")); !got.Equal(utc("2026-01-10T00:05:00Z")) {
		t.Errorf("@every 5m next = %v", got)
	}
}

func TestLoadMinimalMemoryDefaults(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "bext.toml", `
[locking]
backend = "memory"

[[scheduled]]
id = "tick"
cron = "*/5 * * * * *"
hint = "require_global"
command = ["true"]
`)
	c := mustLoad(t, p)
	host, _ := os.Hostname()
	if c.NodeID != host {
		t.Errorf("node_id %q, want the host name %q", c.NodeID, host)
	}
	want := defaultConfig()
	if c.ShutdownGrace != want.ShutdownGrace || !reflect.DeepEqual(c.HTTP, want.HTTP) || c.Log != want.Log ||
		c.Locking.SafetyMargin != want.Locking.SafetyMargin || c.Locking.MaxClockSkew != want.Locking.MaxClockSkew {
		t.Errorf("defaults not filled: %+v", c)
	}
	s := c.Scheduled[0]
	if s.Hint != "require_global" || s.Overlap != "skip" || s.ExpectedRuntime.Duration != time.Minute ||
		s.Jitter.Duration != 0 || s.Timeout.Duration != 0 || s.Location != time.UTC {
		t.Errorf("schedule defaults: %+v", s)
	}
	if got := s.Spec.Next(utc("2026-01-10T00:00:01Z")); !got.Equal(utc("2026-01-10T00:00:05Z")) {
		t.Errorf("6-field cron next = %v", got)
	}
}

func TestLoadEmptyFileIsAnError(t *testing.T) {
	for name, body := range map[string]string{"empty": "", "blank": "  \n\n", "comments only": "# node_id = \"a\"\n  # more\n"} {
		_, err := Load(write(t, t.TempDir(), "empty.toml", body))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(fmt.Sprint(err), "empty") {
			t.Errorf("%s file: error %v, want one saying the config is empty", name, err)
		}
	}
	// One key is enough to be a config (a node that only serves metrics).
	c := mustLoad(t, write(t, t.TempDir(), "min.toml", "node_id = \"a\"\n"))
	if len(c.Scheduled) != 0 || c.Locking.Backend != "" || c.HTTP.Listen != DefaultListen {
		t.Errorf("minimal file: %+v", c)
	}
}

func TestExplicitValuesBeatDefaults(t *testing.T) {
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
shutdown_grace = "3s"
[http]
listen = ""
[log]
level = "debug"
format = "json"
[locking]
backend = "pg"
safety_margin = "1s"
max_clock_skew = "250ms"
[locking.pg]
url = "host=localhost user=postgres password=pw dbname=test"
max_sessions = 4
`))
	if c.ShutdownGrace.Duration != 3*time.Second || c.HTTP.Enabled() || c.Log.Level != "debug" || c.Log.Format != "json" ||
		c.Locking.SafetyMargin.Duration != time.Second || c.Locking.MaxClockSkew.Duration != 250*time.Millisecond ||
		c.Locking.PG.MaxSessions != 4 || c.Locking.PG.OpTimeout.Duration != DefaultPGOpTimeout {
		t.Errorf("explicit values lost: %+v", c)
	}
}

func TestHTTPJobs(t *testing.T) {
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
[[scheduled]]
id = "get"
cron = "@hourly"
[scheduled.http]
url = "https://example.com/a"

[[scheduled]]
id = "post"
cron = "@daily"
http = { url = "http://example.com/b", body = "{}", headers = { "Content-Type" = "application/json" }, success_codes = [200, 204] }

[[scheduled]]
id = "put"
cron = "@daily"
[scheduled.http]
url = "http://example.com/c"
method = "PUT"
timeout = "5s"
`))
	get, post, put := schedule(t, c, "get").HTTP, schedule(t, c, "post").HTTP, schedule(t, c, "put").HTTP
	if get.Method != "GET" || get.Timeout.Duration != DefaultHTTPTimeout || get.SuccessCodes != nil {
		t.Errorf("get = %+v", get)
	}
	if post.Method != "POST" || post.Headers["Content-Type"] != "application/json" || len(post.SuccessCodes) != 2 {
		t.Errorf("post = %+v", post)
	}
	if put.Method != "PUT" || put.Timeout.Duration != 5*time.Second {
		t.Errorf("put = %+v", put)
	}
}

func TestTimezones(t *testing.T) {
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
[[scheduled]]
id = "tokyo"
cron = "0 9 * * *"
timezone = "Asia/Tokyo"
command = ["x"]

[[scheduled]]
id = "cron-tz"
cron = "CRON_TZ=America/New_York 0 9 * * *"
command = ["x"]

[[scheduled]]
id = "cron-tz-agrees"
cron = "CRON_TZ=Asia/Tokyo 0 9 * * *"
timezone = "Asia/Tokyo"
command = ["x"]
`))
	from := utc("2026-01-10T12:00:00Z")
	for _, tc := range []struct{ id, zone, next string }{
		{"tokyo", "Asia/Tokyo", "2026-01-11T00:00:00Z"},          // 09:00 JST
		{"cron-tz", "America/New_York", "2026-01-10T14:00:00Z"},  // 09:00 EST
		{"cron-tz-agrees", "Asia/Tokyo", "2026-01-11T00:00:00Z"}, // 09:00 JST
	} {
		s := schedule(t, c, tc.id)
		if got := s.Spec.Next(from); !got.Equal(utc(tc.next)) {
			t.Errorf("%s: next = %v, want %s", tc.id, got.UTC(), tc.next)
		}
		// Location is the zone that fires, whichever key named it.
		if s.Location.String() != tc.zone {
			t.Errorf("%s: location %v, want %s", tc.id, s.Location, tc.zone)
		}
	}
}

func TestIncludes(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "jobs/a.toml", "[[scheduled]]\nid = \"a\"\ncron = \"@hourly\"\ncommand = [\"a\"]\n")
	write(t, dir, "jobs/b.toml", "[[scheduled]]\nid = \"b\"\ncron = \"@hourly\"\ncommand = [\"b\"]\n")
	write(t, dir, "jobs/notes.txt", "not toml")
	main := write(t, dir, "main.toml", `include = ["jobs/*.toml", "jobs/a.toml", "nothing/*.toml", "*.toml"]`)
	c := mustLoad(t, main)
	var ids []string
	for _, s := range c.Scheduled {
		ids = append(ids, s.ID)
	}
	// Each file once; the main file never includes itself; an empty glob is fine.
	if strings.Join(ids, ",") != "a,b" {
		t.Errorf("ids = %v, want a,b", ids)
	}
}

func TestEnvExpansion(t *testing.T) {
	t.Setenv("BEXT_T_DIR", "/srv/app")
	t.Setenv("BEXT_T_EMPTY", "")
	t.Setenv("BEXT_T_INJECT", "x\"\n[locking]\nbackend = \"redis\"")
	t.Setenv("BEXT_T_JITTER", "15s")
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
[[scheduled]]
id = "env"
cron = "@hourly"
jitter = "${BEXT_T_JITTER}"
dir = "${BEXT_T_DIR}"
command = ["sh", "-c", "echo $$ $HOME ${#arr[@]} $ ${BEXT_T_EMPTY:-fallback} ${BEXT_T_UNSET:-} ${BEXT_T_INJECT}"]
env = { WHERE = "${BEXT_T_DIR}/data" }
`))
	s := c.Scheduled[0]
	if s.Dir != "/srv/app" || s.Env["WHERE"] != "/srv/app/data" || s.Jitter.Duration != 15*time.Second {
		t.Errorf("dir %q env %v jitter %v", s.Dir, s.Env, s.Jitter)
	}
	want := "echo $$ $HOME ${#arr[@]} $ fallback  x\"\n[locking]\nbackend = \"redis\""
	if s.Command[2] != want {
		t.Errorf("command = %q\nwant      %q", s.Command[2], want)
	}
	if c.Locking.Backend != "" {
		t.Errorf("an environment value changed the TOML structure: backend %q", c.Locking.Backend)
	}
}

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"A": "1", "E": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct{ in, want, err string }{
		{"plain", "plain", ""},
		{"${A}${A}", "11", ""},
		{"a${A}b", "a1b", ""},
		{"${E:-d}", "d", ""},
		{"${A:-d}", "1", ""},
		{"${X:-}", "", ""},
		{"$$A $A $", "$$A $A $", ""},
		{"$${A}", "${A}", ""}, // "$${" is the escape for a literal "${"
		{"$$${A}", "$$1", ""},
		{"sh -c \"echo $${BEXT_TICK_TIME}\"", "sh -c \"echo ${BEXT_TICK_TIME}\"", ""},
		{"${1x}", "${1x}", ""},
		{"${}", "${}", ""},
		{"${X}", "", "X is not set"},
		{"${A", "", "unterminated ${A"},
		{"${A:-x", "", "unterminated ${A:-"},
	} {
		got, errs := expandEnv(tc.in, lookup)
		switch {
		case tc.err != "":
			if len(errs) != 1 || !strings.Contains(errs[0], tc.err) {
				t.Errorf("expandEnv(%q) errors %v, want %q", tc.in, errs, tc.err)
			}
		case len(errs) > 0 || got != tc.want:
			t.Errorf("expandEnv(%q) = %q, %v; want %q", tc.in, got, errs, tc.want)
		}
	}
}

// A Config built by hand is checked and resolved by Validate.
func TestValidateByHand(t *testing.T) {
	c := Default()
	c.Locking.Backend = BackendRedis
	c.Locking.Redis.URL = "redis://localhost:6379"
	c.Scheduled = []Schedule{{ID: "a", Cron: "@daily", Command: []string{"x"}, Timezone: "Europe/Paris"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if s := c.Scheduled[0]; s.Spec == nil || s.HintValue != hints.PreferGlobal || s.Location.String() != "Europe/Paris" {
		t.Errorf("not resolved: %+v", s)
	}
	c.Scheduled = append(c.Scheduled, Schedule{ID: "a", Cron: "bad", Jitter: Duration{-time.Second}})
	err := c.Validate()
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) || len(e.Problems) != 4 {
		t.Fatalf("want 4 problems (cron, jitter, no job, duplicate), got %v", err)
	}
}

// [cluster] handoff_delay: the default (capped at half of a small
// max_clock_skew), an explicit value, and "0s" for off.
func TestHandoffDelay(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     time.Duration
	}{
		{"default", "node_id = \"a\"\n", DefaultHandoffDelay},
		{"default under a small skew", "[locking]\nmax_clock_skew = \"200ms\"\n", 100 * time.Millisecond},
		{"explicit", "[cluster]\nhandoff_delay = \"100ms\"\n", 100 * time.Millisecond},
		{"off", "[cluster]\nhandoff_delay = \"0s\"\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.in), "test.toml")
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Cluster.Handoff(c.Locking.MaxClockSkew.Duration); got != tc.want {
				t.Errorf("handoff delay %v, want %v", got, tc.want)
			}
		})
	}
}
