package config

import (
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
