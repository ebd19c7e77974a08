package jobs

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// fullTick is a locked run's tick with every field a job is told set.
func fullTick() scheduler.Tick {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return scheduler.Tick{ScheduleID: "s", Time: at, NodeID: "n", RunID: "r", Attempt: 2,
		PrevTime: at.Add(-time.Hour), LastSuccessTime: at.Add(-time.Hour), LockKey: "s", FencingToken: 7}
}

// readmeJobs is the README's Jobs section.
func readmeJobs(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "\n## Jobs\n")
	if start < 0 {
		t.Fatal("README.md has no \"## Jobs\" section")
	}
	s = s[start+1:]
	if end := strings.Index(s[1:], "\n## "); end >= 0 {
		s = s[:end+1]
	}
	return s
}

// The README's table of the variables a command job gets lists exactly
// the BEXT_* variables the code sets (a locked run, every time known).
func TestReadmeListsEveryJobVariable(t *testing.T) {
	t.Parallel()
	env, err := (&Command{BaseEnv: EnvPolicy{Clean: true}}).environ(fullTick())
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "BEXT_") {
			code = append(code, name)
		}
	}
	var doc []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(BEXT_[A-Z_]+)` \\|").FindAllStringSubmatch(readmeJobs(t), -1) {
		doc = append(doc, m[1])
	}
	slices.Sort(code)
	slices.Sort(doc)
	if !slices.Equal(code, doc) {
		t.Errorf("README's Jobs table lists %v; a command job gets %v", doc, code)
	}
}

// The README names every header an HTTP job sends (a locked run with a
// run id).
func TestReadmeListsEveryHTTPJobHeader(t *testing.T) {
	t.Parallel()
	seen := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
	}))
	defer srv.Close()
	if err := (&HTTP{URL: srv.URL}).Run(context.Background(), fullTick()); err != nil {
		t.Fatal(err)
	}
	h := <-seen
	doc := readmeJobs(t)
	var sent []string
	for name := range h {
		if strings.HasPrefix(name, "X-Bext-") || name == "Idempotency-Key" {
			sent = append(sent, name)
			if !strings.Contains(doc, "`"+name+"`") {
				t.Errorf("README's Jobs section does not name the header %s that an HTTP job sends", name)
			}
		}
	}
	if !slices.Contains(sent, "Idempotency-Key") {
		t.Errorf("an HTTP job sent %v, no Idempotency-Key", sent)
	}
}
