package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// webhookSecret is the credential a Slack-style webhook URL carries in its
// path; the pieces around it identify the workspace and channel.
const webhookSecret = "SECRETxyz"

// leaks reports where any part of a webhook URL's path shows up in out.
func leaks(out string) []string {
	var found []string
	for _, s := range []string{webhookSecret, "T000/B000", "/services/"} {
		if strings.Contains(out, s) {
			found = append(found, s)
		}
	}
	return found
}

// TestWebhookSecretNeverLogged runs a real node whose HTTP jobs post to
// Slack-style webhook URLs and fail (one answers 500, one names a host that
// does not resolve), and reads the node's whole log: the secret in the URL
// path must appear nowhere, while the host still does.
func TestWebhookSecretNeverLogged(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	cfg := writeFile(t, t.TempDir(), "bext.config.toml", fmt.Sprintf(`
node_id = "redact"
shutdown_grace = "2s"
[http]
listen = "off"
[log]
level = "debug"
[[scheduled]]
id = "to-local"
cron = "*/1 * * * * *"
hint = "node_local"
[scheduled.http]
url = "http://%s/services/T000/B000/%s"
method = "POST"
body = "{}"
[[scheduled]]
id = "to-nowhere"
cron = "*/1 * * * * *"
hint = "node_local"
[scheduled.http]
url = "https://hooks.invalid/services/T000/B000/%s"
timeout = "2s"
`, host, webhookSecret, webhookSecret))

	n := proctest.Start(t, bin, nil, "run", "--config", cfg)
	n.WaitLog(regexp.MustCompile(`tick ran.*schedule=to-local.*500`), 30*time.Second)
	n.WaitLog(regexp.MustCompile(`tick ran.*schedule=to-nowhere.*hooks\.invalid`), 30*time.Second)
	n.Signal(syscall.SIGTERM)
	if code := n.Wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	log := n.Log()
	if l := leaks(log); len(l) > 0 {
		t.Errorf("the node's log shows %q:\n%s", l, log)
	}
	if !strings.Contains(log, host) {
		t.Errorf("the log never names the failing host %s:\n%s", host, log)
	}
}

// TestWebhookSecretNotInValidateOrNext: a config problem about a webhook
// URL, and `next` on a valid config holding one, never show its path.
func TestWebhookSecretNotInValidateOrNext(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A closed port: nothing is contacted anyway.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	job := func(url, extra string) string {
		return fmt.Sprintf("[[scheduled]]\nid = \"hook\"\ncron = \"@daily\"\nhint = \"node_local\"\n[scheduled.http]\nurl = %q\n%s", url, extra)
	}
	bad := writeFile(t, dir, "bad.toml", job("ftp://hooks.example/services/T000/B000/"+webhookSecret, `method = "FETCH"`+"\n"))
	r := proctest.Run(t, bin, nil, "validate", "--config", bad)
	if r.Code != 2 || !strings.Contains(r.Stderr, "ftp://hooks.example") {
		t.Fatalf("validate: exit %d, want 2 naming ftp://hooks.example:\n%s", r.Code, r.Stderr)
	}
	if l := leaks(r.Stdout + r.Stderr); len(l) > 0 {
		t.Errorf("validate shows %q:\n%s%s", l, r.Stdout, r.Stderr)
	}
	for _, p := range []string{bad, writeFile(t, dir, "good.toml", job("https://"+addr+"/services/T000/B000/"+webhookSecret, ""))} {
		r = proctest.Run(t, bin, nil, "next", "-n", "2", "--config", p)
		if l := leaks(r.Stdout + r.Stderr); len(l) > 0 {
			t.Errorf("next --config %s shows %q:\n%s%s", p, l, r.Stdout, r.Stderr)
		}
	}
}
