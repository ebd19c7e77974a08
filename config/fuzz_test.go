package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse checks that no document makes Parse panic, and that its answer
// is always either a resolved config or an *Error whose every line names the
// file.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"testdata/bext-sample.toml", "testdata/jobs/cleanup.toml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"",
		job + "command = [\"x\"]\njitter = \"5s\"\n[scheduled.http]\nurl = \"http://h/\"\n",
		"[locking]\nbackend = \"pg\"\n[locking.pg]\nurl = \"postgres://u:p@h/db\"\n",
		"node_id = \"${A:-b}\"\ninclude = [\"*.toml\"]\n[http]\nlisten = \"off\"\n",
		"a.b.c = 1\n[[a.d]]\n[[a.d]]\ne = { f = [1, { g = 2 }] }\n",
	} {
		f.Add([]byte(s))
	}
	// Includes resolve against an empty directory, so a fuzzed glob matches
	// nothing there.
	path := filepath.Join(f.TempDir(), "fuzz.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, path)
		if err == nil {
			if c == nil {
				t.Fatal("nil config without an error")
			}
			for _, s := range c.Scheduled {
				if s.Spec == nil || s.Location == nil || s.HintValue == "" {
					t.Fatalf("schedule %q not resolved", s.ID)
				}
			}
			return
		}
		var e *Error
		if c != nil || !errors.As(err, &e) || !errors.Is(err, ErrInvalid) || len(e.Problems) == 0 {
			t.Fatalf("Parse = %v, %#v", c, err)
		}
		for _, p := range e.Problems {
			if p.File == "" || p.Msg == "" {
				t.Fatalf("problem without file or message: %+v", p)
			}
			if strings.ContainsAny(p.Msg, "\n") && !strings.Contains(string(data), "\n") {
				t.Fatalf("multi-line message from a one-line document: %q", p.Msg)
			}
		}
	})
}

// FuzzPlainTail: a main file whose schedules the fast path read
// (plainTail) loads as the same file decoded whole (a '$' in a last
// comment sends it down the full path): both fail or both give the same
// schedules, with the same lines.
func FuzzPlainTail(f *testing.F) {
	f.Add([]byte(fleetHead + fleet(2, 0)))
	f.Add([]byte("# c\n" + fleetHead + "\n[[scheduled]]\nid = \"x\"\ncron = \"@daily\"\ncommand = [\"a\", 'b']\njitter = \"3s\"\n"))
	f.Add([]byte("[[scheduled]]\r\nid = \"w\"\r\ncron = \"@daily\"\r\ncommand = [\"/bin/true\"]\r\n"))
	path := filepath.Join(f.TempDir(), "fuzz.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if bytes.Contains(data, []byte(`"""`)) || bytes.Contains(data, []byte("'''")) || bytes.IndexByte(data, '$') >= 0 {
			return // the appended comment could land in a string, or both go the full path
		}
		fast, errFast := Parse(data, path)
		full, errFull := Parse(append(data[:len(data):len(data)], "\n# $\n"...), path)
		if (errFast == nil) != (errFull == nil) {
			t.Fatalf("fast: %v\nfull: %v", errFast, errFull)
		}
		if errFast != nil {
			return
		}
		sameSchedules(t, fast.Scheduled, full.Scheduled, "", "id", "cron", "command", "jitter")
	})
}
