package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// RedactURL is internal/redact.URL (tested there); this pins the shape
// config messages rely on.
func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"redis://user:hunter2@localhost:6379/0", "redis://localhost:6379"},
		{"postgres://u:hunter2@h/db?sslmode=disable&password=hunter2", "postgres://h"},
		{"host=h user=u password=hunter2 dbname=d", "host=h"},
		{"https://hooks.example/services/T000/B000/SECRETxyz", "https://hooks.example"},
		{"redis://u:hun@ter/2@h:6379", "redis://h:6379"},
	} {
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// No problem about a URL ever shows its password.
func TestErrorsNeverShowPasswords(t *testing.T) {
	t.Setenv("BEXT_T_REDIS", "http://user:hunter2@redis:6379")
	for i, in := range []string{
		"[locking]\nbackend = \"redis\"\n[locking.redis]\nurl = \"${BEXT_T_REDIS}\"\n",
		"[locking]\nbackend = \"redis\"\n[locking.redis]\nurl = \"redis://u:hunter2@h:99999999999/x%zz\"\n",
		"[locking]\nbackend = \"redis\"\n[locking.redis]\nurl = \"redis://u:hun%zzter2@h\"\n",
		"[locking]\nbackend = \"pg\"\n[locking.pg]\nurl = \"mysql://u:hunter2@h/db\"\n",
		"[locking]\nbackend = \"pg\"\n[locking.pg]\nurl = \"postgres://u:hunter2@h:bad/db\"\n",
		"[[scheduled]]\nid = \"a\"\ncron = \"@daily\"\n[scheduled.http]\nurl = \"ftp://u:hunter2@h/x?password=hunter2\"\n",
		"[[scheduled]]\nid = \"a\"\ncron = \"@daily\"\n[scheduled.http]\nurl = \"https://u:hunter2@/x\"\n",
	} {
		_, err := Parse([]byte(in), "secret.toml")
		if err == nil {
			t.Errorf("case %d: no error", i)
			continue
		}
		if strings.Contains(err.Error(), "hunter") || strings.Contains(fmt.Sprintf("%+v", err), "hunter") {
			t.Errorf("case %d leaks the password:\n%v", i, err)
		}
		if !strings.Contains(err.Error(), "://") {
			t.Errorf("case %d: the message does not show the redacted URL:\n%v", i, err)
		}
	}
}

func TestRedacted(t *testing.T) {
	t.Setenv("BEXT_T_TOKEN", "hunter2")
	dir := t.TempDir()
	p := filepath.Join(dir, "b.toml")
	if err := os.WriteFile(p, []byte(`
[locking]
backend = "redis"
[locking.redis]
url = "redis://:hunter2@localhost:6379"
[locking.pg]
url = "host=h password=hunter2"
[[scheduled]]
id = "hook"
cron = "@daily"
[scheduled.http]
url = "https://bot:hunter2@hooks.example.com/run?pass=hunter2"
headers = { Authorization = "Bearer ${BEXT_T_TOKEN}" }
[[scheduled]]
id = "cmd"
cron = "@daily"
command = ["x"]
env = { API_KEY = "${BEXT_T_TOKEN}" }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := mustLoad(t, p)
	r := c.Redacted()
	for _, s := range []string{fmt.Sprintf("%+v", *r), fmt.Sprintf("%v", r.Locking), fmt.Sprintf("%+v", *r.Scheduled[0].HTTP), fmt.Sprint(c.Locking.Redis), fmt.Sprint(c.Locking.PG)} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("redacted output leaks a secret: %s", s)
		}
	}
	// The original is untouched: the service still needs the real values.
	if c.Locking.Redis.URL != "redis://:hunter2@localhost:6379" || c.Scheduled[0].HTTP.Headers["Authorization"] != "Bearer hunter2" ||
		c.Scheduled[1].Env["API_KEY"] != "hunter2" {
		t.Errorf("Redacted changed the original config")
	}
}
