package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// TestValidateAgreesWithRun: a config that validates is one every node's
// run accepts. Each backend URL below parses as a URL but its backend's
// own parser (go-redis, pgx), which run uses, refuses it: validate must
// refuse it too, exit 2, without showing the password, and run must still
// refuse it (with --listen off and nothing reachable: neither connects).
func TestValidateAgreesWithRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, backend, url, want string }{
		{"redis db not a number", "redis", "redis://u:hunter2@127.0.0.1:1/abc", `invalid database number`},
		{"redis unknown option", "redis", "redis://127.0.0.1:1/0?bogus_option=1", `unexpected option: bogus_option`},
		{"redis bad option value", "redis", "redis://127.0.0.1:1/0?dial_timeout=soon", `dial_timeout`},
		{"pg bad sslmode", "pg", "postgres://u:hunter2@127.0.0.1:1/db?sslmode=bogus", `sslmode is invalid`},
		{"pg bad connect_timeout", "pg", "postgres://127.0.0.1:1/db?connect_timeout=abc", `connect_timeout`},
		{"pg keyword DSN", "pg", "host=127.0.0.1 port=1 password=hunter2 sslmode=bogus", `sslmode is invalid`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeFile(t, t.TempDir(), "bext.config.toml", fmt.Sprintf(`
node_id = "v"
[http]
listen = "off"
[locking]
backend = %q
[locking.%s]
url = %q
[[scheduled]]
id = "j"
cron = "@daily"
command = ["true"]
`, tc.backend, tc.backend, tc.url))
			v := proctest.Run(t, bin, nil, "validate", "--config", cfg)
			r := proctest.Run(t, bin, nil, "run", "--config", cfg)
			if r.Code != exitUsage {
				t.Fatalf("run exit %d, want %d (the premise: run refuses this URL):\n%s", r.Code, exitUsage, r.Stderr)
			}
			if v.Code != r.Code {
				t.Fatalf("validate exit %d, run exit %d: validate must refuse what run refuses\nvalidate: %s%s", v.Code, r.Code, v.Stdout, v.Stderr)
			}
			if !strings.Contains(v.Stderr, tc.want) || !strings.Contains(v.Stderr, "bext.config.toml:8:") {
				t.Errorf("validate does not say %q at the url's line:\n%s", tc.want, v.Stderr)
			}
			if strings.Contains(v.Stderr+r.Stderr, "hunter2") {
				t.Errorf("the password shows:\nvalidate: %s\nrun: %s", v.Stderr, r.Stderr)
			}
		})
	}
}

// TestValidateReportsEveryProblemPastATypeError: a value of the wrong TOML
// type stopped the decoder, hiding every other problem of the file.
func TestValidateReportsEveryProblemPastATypeError(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, t.TempDir(), "bext.config.toml", `node_id = 5
shutdown_grace = "soon"
[[scheduled]]
id = "a}b"
cron = "61 * * * *"
command = ["true"]
`)
	r := proctest.Run(t, bin, nil, "validate", "--config", cfg)
	if r.Code != exitUsage {
		t.Fatalf("validate exit %d, want %d:\n%s", r.Code, exitUsage, r.Stderr)
	}
	for _, want := range []string{
		"bext.config.toml:1: node_id: wrong type",
		"bext.config.toml:2: shutdown_grace: bad duration",
		"bext.config.toml:4: schedule id \"a}b\": '{' and '}' are not allowed",
		"bext.config.toml:5: schedule \"a}b\": bad cron",
	} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("validate does not report %q:\n%s", want, r.Stderr)
		}
	}
}

// The three reports, through the binary: a cron that never fires
// is a problem; a command given as a string is one problem, not also "no
// job" and a syntax error on the next table's header; a ${VAR} value is
// never printed.
func TestValidateInputs(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, t.TempDir(), "bext.config.toml", `node_id = "n"
[[scheduled]]
id = "feb30"
cron = "0 0 30 2 *"
command = ["true"]

[[scheduled]]
id = "typed"
cron = "* * * * *"
command = "true"

[[scheduled]]
id = "sec"
cron = "${BEXT_T_DBPW}"
command = ["true"]
`)
	r := proctest.Run(t, bin, []string{"BEXT_T_DBPW=DBPWSECRET789"}, "validate", "--config", cfg)
	noCrash(t, r)
	want := []string{
		"bext-scheduler: invalid config:",
		`bext.config.toml:4: schedule "feb30": cron "0 0 30 2 *": no tick in the next five years`,
		"bext.config.toml:10: scheduled.command: wrong type: got a TOML string, want an array of strings",
		`bext.config.toml:14: schedule "sec": bad cron "${BEXT_T_DBPW}"`,
	}
	lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
	if r.Code != exitUsage || len(lines) != len(want) || strings.Contains(r.Stderr, "DBPWSECRET789") {
		t.Fatalf("validate exit %d, stderr:\n%s\nwant %d, these %d lines and no secret", r.Code, r.Stderr, exitUsage, len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d = %q, want %q in it", i+1, lines[i], w)
		}
	}
}
