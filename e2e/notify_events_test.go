package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// eventReceiver records the webhook events POSTed to it, by path.
type eventReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	cond   *sync.Cond
	events []map[string]any // each with its "path"
}

func newEventReceiver(t *testing.T) *eventReceiver {
	rc := &eventReceiver{}
	rc.cond = sync.NewCond(&rc.mu)
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev map[string]any
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("webhook body %q: %v", body, err)
			return
		}
		ev["path"] = r.URL.Path
		rc.mu.Lock()
		rc.events = append(rc.events, ev)
		rc.cond.Broadcast()
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.Close)
	return rc
}

// matching returns the events of kind for schedule (under the lock).
func (rc *eventReceiver) matching(kind, schedule string) []map[string]any {
	var out []map[string]any
	for _, ev := range rc.events {
		if ev["event"] == kind && ev["schedule"] == schedule {
			out = append(out, ev)
		}
	}
	return out
}

// waitFor waits until cond (called under the lock) holds.
func (rc *eventReceiver) waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	timer := time.AfterFunc(timeout, func() { rc.mu.Lock(); rc.cond.Broadcast(); rc.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v; events: %v", what, timeout, rc.events)
		}
		rc.cond.Wait()
	}
}

// TestNotifyEvents: a real node on Redis and on Postgres posts the events
// [notify] events chooses, from real runs and skips: an overrun, a
// too_fast run (to its schedule's own notify_url), the ticks missed while
// the process was stopped, and each tick lost (a mark raised by hand, as a
// node that took ticks and died would leave) once, however many audits
// find it again; never the failure streak it did not choose.
func TestNotifyEvents(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *Backend) {
		rc := newEventReceiver(t)
		dir := t.TempDir()
		cfg := filepath.Join(dir, "bext.config.toml")
		writeFile(t, cfg, fmt.Sprintf(`shutdown_grace = "5s"
%s
[history]
audit_every = "1s"

[notify]
url = "%s/hook"
events = ["overrun", "too_fast", "missed", "lost"]

[[scheduled]]
id = "slow"
cron = "*/1 * * * * *"
hint = "require_global"
expected_runtime = "1s"
command = ["/bin/sh", "-c", "sleep 1.3"]

[[scheduled]]
id = "quick"
cron = "*/1 * * * * *"
hint = "require_global"
min_runtime = "500ms"
notify_url = "%s/quick"
command = ["true"]

[[scheduled]]
id = "strict"
cron = "*/5 * * * * *"
hint = "require_global"
catchup_window = "0s"
command = ["true"]

[[scheduled]]
id = "ghost"
cron = "*/1 * * * * *"
hint = "require_global"
command = ["/bin/sh", "-c", "exit 3"]
`, b.Section(time.Second, time.Second), rc.URL, rc.URL))
		node := proctest.Start(t, bextBin, []string{"E2E_BACKEND_ADDR=" + b.Target},
			"run", "--config", cfg, "--node-id", "node-1", "--listen", "off")

		rc.waitFor(t, "an overrun of slow and a too_fast of quick", 30*time.Second, func() bool {
			return len(rc.matching("overrun", "slow")) > 0 && len(rc.matching("too_fast", "quick")) > 0
		})

		// Stopped from half a second before a tick of strict to 2.5s after
		// it: the tick comes later than max_clock_skew, and strict has no
		// catch-up window.
		tick := time.Now().Add(time.Second).Truncate(5 * time.Second).Add(5 * time.Second)
		wait := time.NewTimer(time.Until(tick.Add(-500 * time.Millisecond))) // a wall-clock instant: the fault's timing
		<-wait.C
		node.Signal(syscall.SIGSTOP)
		hold := time.NewTimer(3 * time.Second) // the fault's length, by design
		<-hold.C
		node.Signal(syscall.SIGCONT)
		rc.waitFor(t, "strict's missed tick", 30*time.Second, func() bool { return len(rc.matching("missed", "strict")) > 0 })
		rc.mu.Lock()
		if m := rc.matching("missed", "strict")[0]; m["tick"] != tick.UTC().Format(time.RFC3339) || m["path"] != "/hook" ||
			!strings.Contains(fmt.Sprint(m["text"]), "catch-up window") {
			t.Errorf("missed event %v, want tick %s", m, tick.UTC().Format(time.RFC3339))
		}
		rc.mu.Unlock()

		// Every tick of ghost so far decided and recorded first: its first
		// run after the resume (whose grant recorded the ticks the stop
		// passed over as stopped). A mark raised before that would pass
		// over them undecided, and they would be lost too.
		var after []string
		for k := 3; k <= 6; k++ {
			after = append(after, regexp.QuoteMeta(tick.Add(time.Duration(k)*time.Second).UTC().Format(time.RFC3339)))
		}
		node.WaitLog(regexp.MustCompile(`msg="tick ran" node=node-1 schedule=ghost tick=(`+strings.Join(after, "|")+`) `), 20*time.Second)

		// The ghost's ticks from now to an hour ahead are taken as if by a
		// node that then died: no run, no skip recorded. Each is lost once
		// AuditGrace (15s) has passed.
		raised := time.Now()
		setMark(t, b, "ghost", raised.Add(time.Hour).UTC().Truncate(time.Second))
		rc.waitFor(t, "3 lost ticks of ghost", 90*time.Second, func() bool { return len(rc.matching("lost", "ghost")) >= 3 })
		// A few more audits (every second), which find the same ticks again.
		rc.mu.Lock()
		more := len(rc.matching("lost", "ghost")) + 3
		rc.mu.Unlock()
		rc.waitFor(t, "3 more lost ticks", 30*time.Second, func() bool { return len(rc.matching("lost", "ghost")) >= more })
		node.Signal(syscall.SIGTERM)
		if code := node.Wait(30 * time.Second); code != 0 {
			t.Errorf("node exited %d", code)
		}

		rc.mu.Lock()
		defer rc.mu.Unlock()
		seen := map[string]bool{}
		for _, ev := range rc.matching("lost", "ghost") {
			tick, _ := ev["tick"].(string)
			at, err := time.Parse(time.RFC3339Nano, tick)
			if err != nil || seen[tick] || at.Before(raised.Add(-time.Second)) || ev["path"] != "/hook" || ev["node"] != "node-1" {
				t.Errorf("lost event %v: want each tick after the mark was raised once, on /hook, from node-1", ev)
			}
			seen[tick] = true
		}
		for _, ev := range rc.events {
			switch {
			case ev["event"] == "failure" || ev["event"] == "recovery":
				t.Errorf("event %v was not chosen", ev)
			case ev["schedule"] == "quick" && ev["path"] != "/quick":
				t.Errorf("quick's event %v did not go to its notify_url", ev)
			case ev["schedule"] != "quick" && ev["path"] != "/hook":
				t.Errorf("event %v did not go to [notify] url", ev)
			}
		}
		o := rc.matching("overrun", "slow")[0]
		if d, _ := o["duration_seconds"].(float64); d < 1 || o["limit_seconds"] != float64(1) || !strings.Contains(fmt.Sprint(o["text"]), "overran") {
			t.Errorf("overrun event %v", o)
		}
	})
}

// setMark sets schedule's tick mark in the backend by hand.
func setMark(t *testing.T, b *Backend, schedule string, mark time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	us := mark.UnixMicro()
	switch b.Kind {
	case "redis":
		c := redis.NewClient(&redis.Options{Addr: b.Target})
		defer c.Close()
		if err := c.Set(ctx, b.Name+":{"+schedule+"}:mark", us, 0).Err(); err != nil {
			t.Fatal(err)
		}
	case "pg":
		conn, err := pgx.Connect(ctx, "postgres://postgres@"+b.Target+"/test?sslmode=disable")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		tag, err := conn.Exec(ctx, `UPDATE bext_lock_fences SET tick_mark = $1 WHERE namespace = $2 AND key = $3`, us, b.Name, schedule)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("setting %s's mark: %v (%d rows)", schedule, err, tag.RowsAffected())
		}
	default:
		t.Fatalf("no mark to set on %s", b.Kind)
	}
}
