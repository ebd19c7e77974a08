package config

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
)

// The keys [http] token and read_token, [history] keep, and
// per schedule retries, retry_backoff and pause_after_failures.

func TestOpsKeys(t *testing.T) {
	t.Setenv("BEXT_TEST_API_TOKEN", "w-0123456789abcdef")
	t.Setenv("BEXT_TEST_READ_TOKEN", "r-0123456789abcdef")
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
[http]
listen = "127.0.0.1:0"
token = "${BEXT_TEST_API_TOKEN}"
read_token = "${BEXT_TEST_READ_TOKEN}"
[history]
keep = 20
[[scheduled]]
id = "retrying"
cron = "@hourly"
retries = 2
retry_backoff = "10s"
pause_after_failures = 5
command = ["x"]
[[scheduled]]
id = "plain"
cron = "@hourly"
command = ["x"]
`))
	if c.HTTP.Token != "w-0123456789abcdef" || c.HTTP.ReadToken != "r-0123456789abcdef" || c.History.Keep != 20 {
		t.Errorf("http, history = %q %q %d", c.HTTP.Token, c.HTTP.ReadToken, c.History.Keep)
	}
	s := schedule(t, c, "retrying")
	if s.Retries != 2 || s.RetryBackoff.Duration != 10*time.Second || s.PauseAfterFailures != 5 {
		t.Errorf("retrying = %d %v %d", s.Retries, s.RetryBackoff, s.PauseAfterFailures)
	}
	p := schedule(t, c, "plain")
	if p.Retries != 0 || p.RetryBackoff.Duration != 0 || p.PauseAfterFailures != 0 {
		t.Errorf("plain = %d %v %d, want zeros", p.Retries, p.RetryBackoff, p.PauseAfterFailures)
	}

	// The tokens are secrets: neither the struct's String nor Redacted
	// shows them, in any formatting of the config.
	for _, out := range []string{
		c.HTTP.String(), fmt.Sprint(c.HTTP), fmt.Sprintf("%+v", c.Redacted()), fmt.Sprintf("%v", c.Redacted().HTTP),
	} {
		if strings.Contains(out, "0123456789abcdef") {
			t.Errorf("a token shows in %s", out)
		}
	}
	if r := c.Redacted(); r.HTTP.Token != redacted || r.HTTP.ReadToken != redacted || c.HTTP.Token == redacted {
		t.Errorf("Redacted tokens = %q %q (original %q)", r.HTTP.Token, r.HTTP.ReadToken, c.HTTP.Token)
	}
}

func TestOpsKeyDefaults(t *testing.T) {
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", "[[scheduled]]\nid = \"a\"\ncron = \"@hourly\"\ncommand = [\"x\"]\n"))
	if c.History.Keep != cluster.DefaultKeep || c.HTTP.Token != "" || c.HTTP.ReadToken != "" {
		t.Errorf("defaults: keep %d token %q read_token %q", c.History.Keep, c.HTTP.Token, c.HTTP.ReadToken)
	}
	if d := Default(); d.History.Keep != cluster.DefaultKeep {
		t.Errorf("Default().History.Keep = %d", d.History.Keep)
	}
	// An unset token variable with an empty default leaves writes off.
	c = mustLoad(t, write(t, t.TempDir(), "b.toml", "[http]\ntoken = \"${BEXT_TEST_SURELY_UNSET:-}\"\n[[scheduled]]\nid = \"a\"\ncron = \"@hourly\"\ncommand = [\"x\"]\n"))
	if c.HTTP.Token != "" {
		t.Errorf("token = %q, want empty", c.HTTP.Token)
	}
}

func TestOpsKeyProblems(t *testing.T) {
	const secret = "s3cr3t tok"
	t.Setenv("BEXT_TEST_SPACE_TOKEN", secret)
	for _, tc := range []struct {
		name, in, want string
		line           int
	}{
		{"negative retries", job + "command = [\"x\"]\nretries = -1\n", `schedule "j": retries is -1`, 5},
		{"retries not an int", job + "command = [\"x\"]\nretries = \"two\"\n", `retries: wrong type: got a TOML string, want an integer`, 5},
		{"negative retry_backoff", job + "command = [\"x\"]\nretry_backoff = \"-1s\"\n", `schedule "j": retry_backoff: negative duration`, 5},
		{"bad retry_backoff", job + "command = [\"x\"]\nretry_backoff = \"soon\"\n", `schedule "j": retry_backoff: bad duration`, 5},
		{"negative pause_after_failures", job + "command = [\"x\"]\npause_after_failures = -3\n", `schedule "j": pause_after_failures is -3`, 5},
		{"keep 0", "[history]\nkeep = 0\n" + job + "command = [\"x\"]\n", `history.keep is 0`, 2},
		{"keep too big", "[history]\nkeep = 1000000\n" + job + "command = [\"x\"]\n", `history.keep is 1000000; want 1 to 10000`, 2},
		{"audit_every too short", "[history]\naudit_every = \"10ms\"\n" + job + "command = [\"x\"]\n", `history.audit_every is 10ms; want 1s or more`, 2},
		{"token with a space", "[http]\ntoken = \"${BEXT_TEST_SPACE_TOKEN}\"\n" + job + "command = [\"x\"]\n", `http.token: the token holds a space`, 2},
		{"read_token with a space", "[http]\n\nread_token = \"${BEXT_TEST_SPACE_TOKEN}\"\n" + job + "command = [\"x\"]\n", `http.read_token: the token holds a space`, 3},
		{"unknown history key", "[history]\nkept = 3\n" + job + "command = [\"x\"]\n", `unknown key "history.kept"`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := wantProblem(t, tc.in, tc.want, tc.line); strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the token:\n%v", err)
			}
		})
	}
}
