package config

import (
	"strings"
	"testing"
)

// TestDollarBraceEscape: "$${" writes a literal "${", so a shell command can
// use the job's own variables in braces.
func TestDollarBraceEscape(t *testing.T) {
	c, err := Parse([]byte(job+`command = ["sh", "-c", "echo $${BEXT_TICK_TIME} $$ ${BEXT_T_ESC:-x}"]`+"\n"), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Scheduled[0].Command[2], "echo ${BEXT_TICK_TIME} $$ x"; got != want {
		t.Errorf("command = %q, want %q", got, want)
	}
}

// TestBackendURLsCheckedAsRunDoes: the backends' own parsers judge the URL
// in validation, with the line and no password.
func TestBackendURLsCheckedAsRunDoes(t *testing.T) {
	for _, tc := range []struct{ backend, url, want string }{
		{"redis", "redis://u:hunter2@h:6379/abc", `invalid database number: "abc"`},
		{"redis", "redis://h:6379/0?nope=1", "unexpected option: nope"},
		{"pg", "postgres://u:hunter2@h/db?sslmode=bogus", "sslmode is invalid"},
		{"pg", "postgres://h/db?connect_timeout=abc", "invalid connect_timeout"},
	} {
		_, err := Parse([]byte("[locking]\nbackend = \""+tc.backend+"\"\n[locking."+tc.backend+"]\n\nurl = \""+tc.url+"\"\n"), "t.toml")
		if err == nil || !strings.Contains(err.Error(), "t.toml:5: locking."+tc.backend+".url") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q at line 5", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error shows the password: %v", tc.url, err)
		}
	}
	// The backend not selected is not checked: its URL may stay empty or
	// be a placeholder.
	if _, err := Parse([]byte("[locking]\nbackend = \"pg\"\n[locking.pg]\nurl = \"postgres://h/db\"\n[locking.redis]\nurl = \"redis://h/abc\"\n"), "t.toml"); err != nil {
		t.Errorf("an unused redis URL was checked: %v", err)
	}
}
