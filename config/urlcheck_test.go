package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/bext-dev/bext-scheduler/locking"
)

// TestURLCheckInjected: the backend's URL check is the one the program
// set; a *locking.InvalidError is printed by its Reason alone, any other
// error whole, and with no check set the URL's syntax is all that counts.
func TestURLCheckInjected(t *testing.T) {
	t.Cleanup(func() { SetURLCheck(BackendPG, nil); registerBackendURLChecks() })
	src := []byte("[locking]\nbackend = \"pg\"\n[locking.pg]\nurl = \"postgres://u:pw@h/db\"\n")
	for _, tc := range []struct {
		name  string
		check URLCheck
		want  string // "" for no error
	}{
		{"typed", func(string) error {
			return &locking.InvalidError{Field: "url", Subject: "pg", Reason: "bad sslmode"}
		}, "t.toml:4: locking.pg.url postgres://h: bad sslmode\n"},
		{"wrapped typed", func(string) error {
			return errors.Join(&locking.InvalidError{Field: "url", Subject: "pg", Reason: "bad port"})
		}, "t.toml:4: locking.pg.url postgres://h: bad port\n"},
		{"plain", func(string) error { return errors.New("nope") }, "t.toml:4: locking.pg.url postgres://h: nope\n"},
		{"accepted", func(string) error { return nil }, ""},
		{"none", nil, ""},
	} {
		SetURLCheck(BackendPG, tc.check)
		_, err := Parse(src, "t.toml")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error()+"\n", tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
