package config

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// job is a valid schedule body to append invalid keys to.
const job = "[[scheduled]]\nid = \"j\"\ncron = \"@hourly\"\n"

func TestProblems(t *testing.T) {
	t.Setenv("BEXT_T_SET", "1")
	for _, tc := range []struct {
		name, in, want string
		line           int
	}{
		{"syntax", "node_id = \"a\n", "syntax error", 1},
		{"syntax later", "node_id = \"a\"\n\n[locking\n", "syntax error", 3},
		{"unknown key", "nodeid = \"a\"\n", `unknown key "nodeid"`, 1},
		{"unknown key in locking", "[locking]\nbackend = \"memory\"\nbakend = \"x\"\n", `unknown key "locking.bakend"`, 3},
		{"unknown table", "[lock]\nbackend = \"memory\"\n", "unknown table [lock]", 1},
		{"unknown key in schedule", job + "command = [\"x\"]\ntimout = \"1s\"\n", `unknown key "scheduled.timout"`, 5},
		{"unknown key in http", job + "[scheduled.http]\nurl = \"http://h/\"\nmethd = \"GET\"\n", `unknown key "scheduled.http.methd"`, 6},
		{"key in another case", "\n[Locking]\nbackend = \"memory\"\n", `key "Locking": TOML keys are case-sensitive; write "locking"`, 2},
		{"schedule key in another case", job + "Command = [\"x\"]\n", `key "Command"`, 4},
		{"wrong type", job + "command = \"ls\"\n", "want an array of strings", 4},
		{"bad duration", "shutdown_grace = \"30 seconds\"\n", `bad duration "30 seconds"`, 1},
		{"bad duration in schedule", job + "command = [\"x\"]\njitter = \"5 min\"\n", `schedule "j": jitter: bad duration`, 5},
		{"duration not a string", job + "command = [\"x\"]\n\ntimeout = 30\n", "want a duration string", 6},
		{"negative duration", job + "command = [\"x\"]\njitter = \"-1s\"\n", "negative duration", 5},
		{"negative top-level duration", "[locking]\nmax_clock_skew = \"-2s\"\n", "negative duration", 2},
		{"zero clock-skew tolerance", "[locking]\nmax_clock_skew = \"0s\"\n", "locking.max_clock_skew: must be more than 0", 2},
		{"zero safety margin", "[locking]\nsafety_margin = \"0s\"\n", "locking.safety_margin: must be more than 0", 2},
		{"zero shutdown grace", "node_id = \"a\"\nshutdown_grace = \"0s\"\n", "shutdown_grace: must be more than 0", 2},
		{"zero expected_runtime", job + "command = [\"x\"]\nexpected_runtime = \"0s\"\n", "must be more than zero", 5},
		{"zero op_timeout", "[locking.redis]\nop_timeout = \"0s\"\n", "must be more than zero", 2},
		{"bad cron", job[:len(job)-len("cron = \"@hourly\"\n")] + "command = [\"x\"]\ncron = \"61 * * * *\"\n", `bad cron "61 * * * *"`, 4},
		{"cron 7 fields", "[[scheduled]]\nid = \"j\"\ncron = \"0 0 0 * * * *\"\ncommand = [\"x\"]\n", "bad cron", 3},
		{"missing cron", "[[scheduled]]\nid = \"j\"\ncommand = [\"x\"]\n", "cron is missing", 1},
		{"bad CRON_TZ", "[[scheduled]]\nid = \"j\"\ncommand = [\"x\"]\ncron = \"CRON_TZ=Mars/Base 0 3 * * *\"\n", "bad cron", 4},
		{"unknown timezone", job + "command = [\"x\"]\ntimezone = \"Mars/Olympus\"\n", `unknown timezone "Mars/Olympus"`, 5},
		{"duplicate id", job + "command = [\"x\"]\n" + job + "command = [\"y\"]\n", `duplicate id "j": also declared at test.toml:2`, 6},
		{"empty id", "[[scheduled]]\nid = \"\"\ncron = \"@daily\"\ncommand = [\"x\"]\n", "empty id", 2},
		{"missing id", "\n[[scheduled]]\ncron = \"@daily\"\ncommand = [\"x\"]\n", "empty id", 2},
		{"id not a lock key", "[[scheduled]]\nid = \"a\\tb\"\ncron = \"@daily\"\ncommand = [\"x\"]\n", "control character", 2},
		{"id too long", "[[scheduled]]\nid = \"" + strings.Repeat("k", 1025) + "\"\ncron = \"@daily\"\ncommand = [\"x\"]\n", "1025 bytes", 2},
		{"unknown hint", job + "command = [\"x\"]\nhint = \"global\"\n", `unknown hint "global"`, 5},
		{"unknown overlap", job + "command = [\"x\"]\noverlap = \"replace-ish\"\n", `unknown overlap "replace-ish" (want skip, allow, queue or replace)`, 5},
		{"unknown backend", "[locking]\nbackend = \"etcd\"\n", `unknown backend "etcd"`, 2},
		{"redis without url", "[locking]\nbackend = \"redis\"\n", `needs locking.redis.url`, 2},
		{"pg without url", "\n[locking]\nbackend = \"pg\"\n", `needs locking.pg.url`, 3},
		{"bad redis url", "[locking]\nbackend = \"redis\"\n[locking.redis]\nurl = \"http://h\"\n", "want a redis://", 4},
		{"bad pg url", "[locking]\nbackend = \"pg\"\n[locking.pg]\nurl = \"localhost\"\n", "want a postgres:// URL", 4},
		{"pg max_sessions", "[locking]\nbackend = \"pg\"\n[locking.pg]\nurl = \"postgres://h/db\"\nmax_sessions = 0\n", "max_sessions is 0", 5},
		{"require_global without backend", job + "command = [\"x\"]\nhint = \"require_global\"\n", "needs a lock backend", 5},
		{"no job", job, "no job", 1},
		{"both jobs", job + "command = [\"x\"]\n[scheduled.http]\nurl = \"http://h/\"\n", "both command and", 4},
		{"empty command", job + "command = []\n", "empty command", 4},
		{"empty program", job + "command = [\"\", \"x\"]\n", "empty command", 4},
		{"bad env name", job + "command = [\"x\"]\nenv = { \"A=B\" = \"1\" }\n", `bad variable name "A=B"`, 5},
		{"http bad url", job + "[scheduled.http]\nurl = \"ftp://h/x\"\n", "want an http:// or https:// URL", 5},
		{"http no url", job + "[scheduled.http]\nmethod = \"GET\"\n", "http.url", 4},
		{"http bad method", job + "[scheduled.http]\nurl = \"http://h/\"\nmethod = \"FETCH\"\n", `unknown method "FETCH"`, 6},
		{"http bad header", job + "[scheduled.http]\nurl = \"http://h/\"\nheaders = { \"Bad Name\" = \"v\" }\n", "bad header name", 6},
		{"http bad code", job + "[scheduled.http]\nurl = \"http://h/\"\nsuccess_codes = [200,\n  700]\n", "700 is not an HTTP status", 7},
		{"http zero timeout", job + "[scheduled.http]\nurl = \"http://h/\"\ntimeout = \"0s\"\n", "must be more than zero", 6},
		{"unset variable", job + "command = [\"x\",\n  \"${BEXT_T_UNSET}\"]\n", "BEXT_T_UNSET is not set", 5},
		{"unset variable in url", "[locking]\nbackend = \"redis\"\n[locking.redis]\nurl = \"${BEXT_T_NOPE}\"\n", "BEXT_T_NOPE is not set", 4},
		{"unterminated variable", "node_id = \"${BEXT_T_SET\"\n", "unterminated ${BEXT_T_SET", 1},
		{"bad log level", "[log]\nlevel = \"verbose\"\n", `unknown level "verbose"`, 2},
		{"bad log format", "[log]\nformat = \"xml\"\n", `unknown format "xml"`, 2},
		{"bad listen", "[http]\nlisten = \"9464\"\n", `http.listen "9464"`, 2},
		{"NUL byte", "node_id = \"a\"\n\nx = \"\x00\"\n", "NUL byte", 3},
		{"bad include glob", "include = [\"[\"]\n", "bad glob", 1},
		{"bad handoff delay", "[cluster]\nhandoff_delay = \"quick\"\n", `cluster.handoff_delay: bad duration "quick"`, 2},
		{"negative handoff delay", "[cluster]\nhandoff_delay = \"-1s\"\n", "cluster.handoff_delay: negative duration", 2},
		{"handoff delay over half the skew", "[locking]\nmax_clock_skew = \"500ms\"\n[cluster]\n\nhandoff_delay = \"300ms\"\n",
			"cluster.handoff_delay: 300ms is more than half of locking.max_clock_skew (500ms)", 5},
		{"unknown key in cluster", "[cluster]\nhandof_delay = \"1s\"\n", `unknown key "cluster.handof_delay"`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, tc.in, tc.want, tc.line)
		})
	}
}

// wantProblem parses in as test.toml and fails t unless it is refused with
// an *Error (ErrInvalid, no config) one of whose problems mentions want at
// test.toml:line. It returns that error, for more checks.
func wantProblem(t *testing.T, in, want string, line int) *Error {
	t.Helper()
	c, err := Parse([]byte(in), "test.toml")
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) || c != nil {
		t.Fatalf("Parse = %v, %v; want an *Error matching ErrInvalid and no config", c, err)
	}
	for _, p := range e.Problems {
		if strings.Contains(p.Msg, want) {
			if p.File != "test.toml" || p.Line != line {
				t.Errorf("%q at %s:%d, want test.toml:%d", want, p.File, p.Line, line)
			}
			return e
		}
	}
	t.Errorf("no problem mentions %q; got:\n%v", want, err)
	return e
}

// A value whose ${VAR} failed is reported once, for the variable, not again
// as an empty or malformed value.
func TestUnsetVariableReportedOnce(t *testing.T) {
	_, err := Parse([]byte("[locking]\nbackend = \"redis\"\n[locking.redis]\nurl = \"${BEXT_T_NOPE}\"\n"), "t.toml")
	var e *Error
	if !errors.As(err, &e) || len(e.Problems) != 1 {
		t.Fatalf("want exactly 1 problem, got:\n%v", err)
	}
}

func TestAllProblemsAtOnce(t *testing.T) {
	in := `node_id = "n"
colour = "blue"
[[scheduled]]
id = "a"
cron = "0 25 * * *"
command = ["x"]
[[scheduled]]
id = "a"
cron = "@daily"
hint = "sometimes"
command = ["y"]
jitter = "soon"
`
	_, err := Parse([]byte(in), "four.toml")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want *Error, got %v", err)
	}
	want := []string{
		`four.toml:2: unknown key "colour"`,
		`four.toml:5: schedule "a": bad cron "0 25 * * *"`,
		`four.toml:8: duplicate id "a": also declared at four.toml:4`,
		`four.toml:10: schedule "a": unknown hint "sometimes"`,
		`four.toml:12: schedule "a": jitter: bad duration "soon"`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%v", len(lines), len(want), err)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d = %q\nwant prefix  %q", i, lines[i], want[i])
		}
	}
}

func TestIncludeProblems(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "jobs/ok.toml", "[[scheduled]]\nid = \"ok\"\ncron = \"@daily\"\ncommand = [\"x\"]\n")
	write(t, dir, "jobs/sets.toml", "node_id = \"sneaky\"\n[[scheduled]]\nid = \"ok\"\ncron = \"@daily\"\ncommand = [\"x\"]\n")
	write(t, dir, "jobs/broken.toml", "[[scheduled]\n")
	if err := os.Mkdir(filepath.Join(dir, "jobs", "dir.toml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "jobs", "dangling.toml")); err != nil {
		t.Fatal(err)
	}
	main := write(t, dir, "main.toml", "node_id = \"n\"\ninclude = [\"jobs/*.toml\"]\n")
	_, err := Load(main)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	jobs := filepath.Join(dir, "jobs")
	for _, want := range []string{
		filepath.Join(jobs, "sets.toml") + `:1: "node_id": an included file may hold only [[scheduled]] tables`,
		filepath.Join(jobs, "sets.toml") + `:3: duplicate id "ok": also declared at ` + filepath.Join(jobs, "ok.toml") + ":2",
		filepath.Join(jobs, "broken.toml") + ":1: syntax error",
		filepath.Join(jobs, "dir.toml") + ": included by " + main + `:2: include "jobs/*.toml": cannot read config: is a directory`,
		filepath.Join(jobs, "dangling.toml") + ": included by " + main + `:2: include "jobs/*.toml": cannot read config: no such file`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.Is(fs.ErrNotExist, ErrInvalid) = %v, %v", errors.Is(err, fs.ErrNotExist), errors.Is(err, ErrInvalid))
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	junk := make([]byte, 4096)
	if _, err := rand.Read(junk); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(40 << 20); err != nil { // sparse: 40 MB without writing it
		t.Fatal(err)
	}
	f.Close()
	for _, tc := range []struct {
		name, path, want string
		notExist         bool
	}{
		{"missing", filepath.Join(dir, "nope.toml"), "no such file", true},
		{"directory", dir, "is a directory", false},
		{"junk", write(t, dir, "junk.toml", string(junk)), "junk.toml:", false},
		{"40 MB", big, fmt.Sprintf("over the %d byte limit", MaxFileSize), false},
		{"NUL", write(t, dir, "nul.toml", "a = 1\x00\n"), "nul.toml:1: file contains a NUL byte", false},
		{"not regular", os.DevNull, "not a regular file", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.path)
			if err == nil || c != nil {
				t.Fatalf("Load = %v, %v; want an error", c, err)
			}
			if !errors.Is(err, ErrInvalid) || errors.Is(err, fs.ErrNotExist) != tc.notExist {
				t.Errorf("errors.Is: ErrInvalid %v, ErrNotExist %v (want %v)", errors.Is(err, ErrInvalid), errors.Is(err, fs.ErrNotExist), tc.notExist)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	if _, err := Parse(make([]byte, MaxFileSize+1), "big"); err == nil || !strings.Contains(err.Error(), "byte limit") {
		t.Errorf("Parse of an oversized document: %v", err)
	}
}
