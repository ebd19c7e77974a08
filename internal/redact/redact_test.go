package redact

import (
	"strings"
	"testing"
)

const slack = "https://hooks.example/services/T000/B000/SECRETxyz"

func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{slack, "https://hooks.example"},
		{"https://hooks.example:8443/services/T000/B000/SECRETxyz?x=1#frag", "https://hooks.example:8443"},
		{"https://discord.example/api/webhooks/123/SECRETxyz", "https://discord.example"},
		{"redis://localhost:6379/0", "redis://localhost:6379"},
		{"redis://:hunter2@localhost:6379", "redis://localhost:6379"},
		{"rediss://alice:hunter2@h:1/0?x=1", "rediss://h:1"},
		{"redis://u:hunter2/@x@h1:1,h2:2/0", "redis://h1:1,h2:2"},
		{"redis://h/0?master_name=m&password=hunter2", "redis://h"},
		{"unix://u:hunter2@/run/redis.sock?db=1&password=hunter2", "unix:///run/redis.sock"},
		{"postgres://u:hunter2@h/db?sslmode=disable&password=hunter2", "postgres://h"},
		{"postgres://[::1]:5432/db", "postgres://[::1]:5432"},
		{"host=h port=5433 user=u password=hunter2 dbname=d", "host=h port=5433"},
		{"password='hunter 2' dbname=d", "(keyword DSN)"},
		{"localhost:6379", "localhost:6379"},
		{"/relative/SECRETxyz", NotAURL},
		{"ht tp://u:hunter2@h/", NotAURL},
		// url.Parse rejects these: the raw text is still cut safely.
		{"redis://u:hun%zzter2@h:6379", "redis://h:6379"},
		{"redis://u:hun@ter/2@h:6379", "redis://h:6379"},
		{"redis://u:pa?ss@h:6379/0", "redis://h:6379"},
		{"https://u:hunter2@h:99999999999/x%zz", "https://h:99999999999"},
		// An '@' after the path is data, not user info.
		{"https://h.example/x?email=a@b.example&token=hunter2", "https://h.example"},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestScrub(t *testing.T) {
	for _, tc := range []struct{ raw, msg string }{
		{slack, `Post "` + slack + `": dial tcp: lookup hooks.example: no such host`},
		{slack, "bad path /services/T000/B000/SECRETxyz and token SECRETxyz"},
		{"redis://u:hunter2@h:1/abc", `invalid database number: "abc" in redis://u:hunter2@h:1/abc, password hunter2`},
		{"redis://u:hunt%21er@h:1/0", "auth failed for hunt!er"},
		{"postgres://u:hunter2@h/db?sslmode=bogus", "cannot parse `postgres://u:hunter2@h/db?sslmode=bogus`: hunter2"},
		{"host=h password='hunter 2' sslmode=bogus", "password=hunter 2 is odd"},
		{"https://h/x?sig=abcd1234&v=1", "signature abcd1234 expired"},
	} {
		got := Scrub(tc.msg, tc.raw)
		for _, secret := range []string{"SECRETxyz", "hunter", "hunt!er", "abcd1234"} {
			if strings.Contains(got, secret) {
				t.Errorf("Scrub(%q, %q) = %q: %s is still there", tc.msg, tc.raw, got, secret)
			}
		}
	}
	// A short path such as a database number is not a secret: messages
	// keep their words.
	if got := Scrub("database 0 of redis://h:1/0 is fine", "redis://h:1/0"); got != "database 0 of redis://h:1 is fine" {
		t.Errorf("Scrub garbled a harmless message: %q", got)
	}
}
