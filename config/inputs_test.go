package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// problemsOf parses in and returns its problems, one "line: msg" each.
func problemsOf(t *testing.T, in string) []string {
	t.Helper()
	_, err := Parse([]byte(in), "t.toml")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Parse = %v; want an *Error", err)
	}
	var out []string
	for _, p := range e.Problems {
		out = append(out, p.String())
	}
	return out
}

// A value of the wrong type is one problem: not also the "no job" or
// "cron is missing" its absence would cause, nor a syntax error on the
// header of the table after it (the blanked statement took its "[[").
func TestWrongTypeIsOneProblem(t *testing.T) {
	t.Parallel()
	const next = "\n[[scheduled]]\nid = \"after\"\ncron = \"@daily\"\ncommand = [\"x\"]\n"
	for _, tc := range []struct{ name, in, want string }{
		{"command a string", job + "command = \"true\"\n", `t.toml:4: scheduled.command: wrong type`},
		{"command a string, a table after", job + "command = \"true\"" + next, `t.toml:4: scheduled.command: wrong type`},
		{"http a string, a table after", job + "http = \"http://h/\"" + next, `t.toml:4: scheduled.http: wrong type`},
		{"cron an integer", "[[scheduled]]\nid = \"j\"\ncommand = [\"x\"]\ncron = 5" + next, `t.toml:4: scheduled.cron: wrong type`},
		{"id an integer", "[[scheduled]]\nid = 7\ncron = \"@daily\"\ncommand = [\"x\"]" + next, `t.toml:2: scheduled.id: wrong type`},
		{"quoted key", job + "\"command\" = \"true\"" + next, `t.toml:4: scheduled.command: wrong type`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := problemsOf(t, tc.in)
			if len(got) != 1 || !strings.HasPrefix(got[0], tc.want) {
				t.Errorf("problems:\n%s\nwant one, starting %q", strings.Join(got, "\n"), tc.want)
			}
		})
	}
}

// A cron that never fires is a config error, not a schedule that idles.
func TestCronWithoutTick(t *testing.T) {
	t.Parallel()
	for _, cron := range []string{"0 0 30 2 *", "0 0 31 4 *", "CRON_TZ=Europe/Paris 0 0 31 11 *"} {
		got := problemsOf(t, "[[scheduled]]\nid = \"feb30\"\ncommand = [\"x\"]\ncron = \""+cron+"\"\n")
		want := `t.toml:4: schedule "feb30": cron "` + cron + `": no tick in the next five years`
		if len(got) != 1 || !strings.HasPrefix(got[0], want) {
			t.Errorf("problems:\n%s\nwant one, starting %q", strings.Join(got, "\n"), want)
		}
	}
	// Rare is fine: February 29th comes every four years.
	if _, err := Parse([]byte("[[scheduled]]\nid = \"leap\"\ncommand = [\"x\"]\ncron = \"0 0 29 2 *\"\n"), "t.toml"); err != nil {
		t.Errorf("leap day: %v", err)
	}
}

// A value that came from ${VAR} may be a secret: no problem echoes it,
// whole or in part; the message shows what the file says instead.
func TestExpandedValueNotEchoed(t *testing.T) {
	t.Setenv("BEXT_T_SECRET", "DBPWSECRET789")
	t.Setenv("BEXT_T_LEVEL", "HUNTER2SECRET")
	in := "[log]\nlevel = \"${BEXT_T_LEVEL}\"\n" +
		"[[scheduled]]\nid = \"sec\"\ncommand = [\"x\"]\ncron = \"${BEXT_T_SECRET}\"\ntimeout = \"${BEXT_T_SECRET}\"\n" +
		"[[scheduled]]\nid = \"part\"\ncommand = [\"x\"]\ncron = \"0 ${BEXT_T_SECRET} * * *\"\n"
	got := strings.Join(problemsOf(t, in), "\n")
	for _, secret := range []string{"DBPWSECRET789", "HUNTER2SECRET"} {
		if strings.Contains(got, secret) {
			t.Errorf("a problem echoes %s:\n%s", secret, got)
		}
	}
	for _, want := range []string{
		`t.toml:2: log.level: unknown level "${BEXT_T_LEVEL}"`,
		`t.toml:6: schedule "sec": bad cron "${BEXT_T_SECRET}"`,
		`t.toml:7: schedule "sec": timeout: bad duration "${BEXT_T_SECRET}"`,
		`t.toml:11: schedule "part": bad cron "0 ${BEXT_T_SECRET} * * *"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}

// Include globs take regular files only, never from /proc, /sys or /dev,
// and no more than MaxIncludeBytes in all.
func TestIncludeLimits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sched := "[[scheduled]]\nid = \"%s\"\ncron = \"@daily\"\ncommand = [\"x\"]\n"
	write(t, dir, "jobs/ok.toml", strings.ReplaceAll(sched, "%s", "ok"))
	if err := os.Symlink("/proc/self/status", filepath.Join(dir, "jobs", "proc.toml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(dir, "jobs", "null.toml")); err != nil {
		t.Fatal(err)
	}
	main := write(t, dir, "main.toml", "node_id = \"n\"\ninclude = [\"jobs/*.toml\", \"/sys/kernel/*\", \"/proc/self/stat*\"]\n")
	_, err := Load(main)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{
		filepath.Join(dir, "jobs", "proc.toml") + `: included by ` + main + `:2: include "jobs/*.toml": resolves to /proc/`,
		filepath.Join(dir, "jobs", "null.toml") + `: included by ` + main + `:2: include "jobs/*.toml": resolves to /dev/null, under /dev`,
		`include "/sys/kernel/*": `,
		`include "/proc/self/stat*": `,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}

	// The total: files that fit one by one but not together (sparse, so
	// nothing is written; the ones under the limit are read and refused
	// for their NUL bytes).
	big := t.TempDir()
	if err := os.Mkdir(filepath.Join(big, "jobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		f, err := os.Create(filepath.Join(big, "jobs", n+".toml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(MaxIncludeBytes/2 - 1<<20); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	main = write(t, big, "main.toml", "node_id = \"n\"\ninclude = [\"jobs/*.toml\"]\n")
	_, err = Load(main)
	want := filepath.Join(big, "jobs", "c.toml") + `: included by ` + main + `:2: include "jobs/*.toml": the included files pass the 67108864 byte limit for all includes`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Load = %v\nwant %q", err, want)
	}
}

// A default's text is in its source: shown once, not replaced again.
func TestExpandedDefaultNotGarbled(t *testing.T) {
	got := problemsOf(t, "[log]\nlevel = \"${BEXT_T_UNSET_LEVEL:-loud}\"\n")
	want := `t.toml:2: log.level: unknown level "${BEXT_T_UNSET_LEVEL:-loud}"`
	if len(got) != 1 || !strings.HasPrefix(got[0], want) {
		t.Errorf("problems:\n%s\nwant one, starting %q", strings.Join(got, "\n"), want)
	}
}
