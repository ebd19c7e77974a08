package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"redis://localhost:6379/0", "redis://localhost:6379/0"},
		{"redis://:hunter2@localhost:6379", "redis://:xxxxx@localhost:6379"},
		{"redis://user:hunter2@localhost:6379/0", "redis://user:xxxxx@localhost:6379/0"},
		{"postgres://postgres@localhost/bext", "postgres://postgres@localhost/bext"},
		{"postgres://u:hunter2@h/db?sslmode=disable&password=hunter2", "postgres://u:xxxxx@h/db?sslmode=disable&password=xxxxx"},
		{"postgres://h/db?pass=hunter2", "postgres://h/db?pass=xxxxx"},
		{"postgres://h/db?PASSWD=hunter2&x=1", "postgres://h/db?PASSWD=xxxxx&x=1"},
		{"host=h user=u password=hunter2 dbname=d", "host=h user=u password=xxxxx dbname=d"},
		{"host=h password='hunter 2' dbname=d", "host=h password=xxxxx dbname=d"},
		{"host=h sslpassword=hunter2", "host=h sslpassword=xxxxx"},
		{"password=hunter2", "password=xxxxx"},
		{"host=h password = hunter2", "host=h password = xxxxx"},
		// url.Parse rejects these: the raw text is still redacted.
		{"redis://u:hun%zzter2@h:6379", "redis://u:xxxxx@h:6379"},
		{"redis://u:hun@ter/2@h:6379", "redis://u:xxxxx@h:6379"},
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
		if !strings.Contains(err.Error(), "xxxxx") {
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
