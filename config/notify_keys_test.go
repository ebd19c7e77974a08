package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The keys ping_url and min_runtime per schedule, and the
// [notify] table. URLs are secrets: expanded from ${VAR}, and shown only
// as scheme://host[:port].

const hcSecret = "0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"

func TestNotifyKeys(t *testing.T) {
	t.Setenv("HC_UUID", hcSecret)
	t.Setenv("HOOK", "https://hooks.slack.example/services/T000/B000/XXXXSECRETXXXX")
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
[notify]
url = "${HOOK}"
timeout = "3s"

[[scheduled]]
id = "backup"
cron = "@daily"
expected_runtime = "20m"
min_runtime = "5m"
ping_url = "https://hc-ping.com/${HC_UUID}"
command = ["x"]

[[scheduled]]
id = "plain"
cron = "@hourly"
command = ["x"]
`))
	if c.Notify.URL != "https://hooks.slack.example/services/T000/B000/XXXXSECRETXXXX" || c.Notify.Timeout.Duration != 3*time.Second {
		t.Errorf("notify = %+v", c.Notify)
	}
	b := schedule(t, c, "backup")
	if b.PingURL != "https://hc-ping.com/"+hcSecret || b.MinRuntime.Duration != 5*time.Minute {
		t.Errorf("backup: ping_url %q min_runtime %v", b.PingURL, b.MinRuntime.Duration)
	}
	if p := schedule(t, c, "plain"); p.PingURL != "" || p.MinRuntime.Duration != 0 {
		t.Errorf("plain: ping_url %q min_runtime %v, want none", p.PingURL, p.MinRuntime.Duration)
	}
	r := c.Redacted()
	shown := fmt.Sprintf("%+v %+v", r.Notify, r.Scheduled)
	if strings.Contains(shown, hcSecret) || strings.Contains(shown, "SECRET") {
		t.Errorf("Redacted shows a secret: %s", shown)
	}
	if r.Notify.URL != "https://hooks.slack.example" || r.Scheduled[0].PingURL != "https://hc-ping.com" {
		t.Errorf("Redacted URLs %q %q", r.Notify.URL, r.Scheduled[0].PingURL)
	}

	d := mustLoad(t, write(t, t.TempDir(), "d.toml", "[[scheduled]]\nid = \"j\"\ncron = \"@hourly\"\ncommand = [\"x\"]\n"))
	if d.Notify.URL != "" || d.Notify.Timeout.Duration != DefaultNotifyTimeout || d.Notify.Events != nil ||
		!slices.Equal(d.Notify.EventsOrDefault(), []string{"failure", "recovery", "paused"}) {
		t.Errorf("defaults: notify = %+v", d.Notify)
	}
}

// [notify] events and a schedule's notify_url, on the full path and on
// the include fast path; notify_url is a secret like ping_url.
func TestNotifyEventsAndURL(t *testing.T) {
	t.Setenv("OWN_HOOK", "https://hooks.example/own/"+hcSecret)
	dir := t.TempDir()
	write(t, dir, "more.toml", "[[scheduled]]\nid = \"fast\"\ncron = \"@hourly\"\ncommand = [\"x\"]\nnotify_url = \"https://hooks.example/fast/X\"\n")
	c := mustLoad(t, write(t, dir, "b.toml", `include = ["more.toml"]
[notify]
events = ["overrun", "lost"]

[[scheduled]]
id = "own"
cron = "@daily"
notify_url = "${OWN_HOOK}"
command = ["x"]
`))
	if !slices.Equal(c.Notify.Events, []string{"overrun", "lost"}) || !slices.Equal(c.Notify.EventsOrDefault(), c.Notify.Events) {
		t.Errorf("events = %v", c.Notify.Events)
	}
	if s := schedule(t, c, "own"); s.NotifyURL != "https://hooks.example/own/"+hcSecret {
		t.Errorf("own: notify_url %q", s.NotifyURL)
	}
	if s := schedule(t, c, "fast"); s.NotifyURL != "https://hooks.example/fast/X" {
		t.Errorf("fast (include fast path): notify_url %q", s.NotifyURL)
	}
	r := c.Redacted()
	if shown := fmt.Sprintf("%+v", r.Scheduled); strings.Contains(shown, hcSecret) || r.Scheduled[0].NotifyURL != "https://hooks.example" {
		t.Errorf("Redacted shows %q", shown)
	}
	none := mustLoad(t, write(t, t.TempDir(), "n.toml", "[notify]\nevents = []\n"+job+"command = [\"x\"]\n"))
	if none.Notify.Events == nil || len(none.Notify.EventsOrDefault()) != 0 {
		t.Errorf("events = [] is %v, want none sent", none.Notify.EventsOrDefault())
	}
}

func TestNotifyKeyProblems(t *testing.T) {
	const secret = "hunter2-token-1234"
	for _, tc := range []struct {
		name, in, want string
		line           int
	}{
		{"ping_url not http", job + "command = [\"x\"]\nping_url = \"ftp://u:" + secret + "@h/" + secret + "\"\n",
			`schedule "j": ping_url ftp://h: want an http:// or https:// URL`, 5},
		{"ping_url without host", job + "command = [\"x\"]\nping_url = \"https:///" + secret + "\"\n",
			`ping_url https://: no host`, 5},
		{"ping_url not a string", job + "command = [\"x\"]\nping_url = 5\n", `ping_url: wrong type`, 5},
		{"min_runtime negative", job + "command = [\"x\"]\nmin_runtime = \"-1s\"\n", `schedule "j": min_runtime: negative duration`, 5},
		{"min_runtime bad", job + "command = [\"x\"]\nmin_runtime = \"fast\"\n", `min_runtime: bad duration`, 5},
		{"min_runtime at expected_runtime", job + "command = [\"x\"]\nexpected_runtime = \"2m\"\nmin_runtime = \"2m\"\n",
			`schedule "j": min_runtime 2m0s is not below expected_runtime 2m0s`, 6},
		{"min_runtime over the default expected_runtime", job + "command = [\"x\"]\nmin_runtime = \"5m\"\n",
			`min_runtime 5m0s is not below expected_runtime 1m0s`, 5},
		{"notify url not http", "[notify]\nurl = \"smtp://" + secret + "@mail\"\n" + job + "command = [\"x\"]\n",
			`notify.url smtp://mail: want an http:// or https:// URL`, 2},
		{"notify timeout over 5s", "[notify]\ntimeout = \"30s\"\n" + job + "command = [\"x\"]\n",
			`notify.timeout 30s is over 5s`, 2},
		{"notify timeout zero", "[notify]\ntimeout = \"0s\"\n" + job + "command = [\"x\"]\n",
			`notify.timeout: must be more than zero`, 2},
		{"notify unknown key", "[notify]\nurls = \"x\"\n" + job + "command = [\"x\"]\n", `unknown key "notify.urls"`, 2},
		{"notify unknown event", "[notify]\nurl = \"https://h/x\"\nevents = [\"failure\", \"overruns\"]\n" + job + "command = [\"x\"]\n",
			`notify.events: unknown event "overruns" (want failure, recovery, paused, overrun, too_fast, missed or lost)`, 3},
		{"notify events not a list", "[notify]\nevents = \"failure\"\n" + job + "command = [\"x\"]\n", `notify.events: wrong type`, 2},
		{"notify_url not http", job + "command = [\"x\"]\nnotify_url = \"ftp://u:" + secret + "@h/" + secret + "\"\n",
			`schedule "j": notify_url ftp://h: want an http:// or https:// URL`, 5},
		{"notify_url without host", job + "command = [\"x\"]\nnotify_url = \"https:///" + secret + "\"\n",
			`notify_url https://: no host`, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := wantProblem(t, tc.in, tc.want, tc.line); strings.Contains(err.Error(), secret) {
				t.Errorf("the message shows the secret: %v", err)
			}
		})
	}
}

// An unset ${VAR} in ping_url is one problem, on its line, naming the
// variable and not a half-expanded URL.
func TestPingURLUnsetVar(t *testing.T) {
	_, err := Parse([]byte(job+"command = [\"x\"]\nping_url = \"https://hc-ping.com/${BEXT_TEST_UNSET_UUID}\"\n"), "t.toml")
	if err == nil || !strings.Contains(err.Error(), "t.toml:5:") || !strings.Contains(err.Error(), "BEXT_TEST_UNSET_UUID") {
		t.Errorf("Parse = %v, want a problem at t.toml:5 naming BEXT_TEST_UNSET_UUID", err)
	}
}
