package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// three real nodes on Redis and on Postgres, a require_global
// schedule every second with a ping_url, and a local receiver standing in
// for healthchecks.io (and for the [notify] webhook).

const hcToken = "3b9f4c2e-hc-secret-token"

// hcPing is one ping the receiver got.
type hcPing struct {
	What string // start, success, fail, or an exit status
	RID  string
}

// hcReceiver records pings and webhook events; every request is answered
// only after delay (a slow monitor: the ticks must not wait for it), and
// the first webhook POST gets a 500 (it must be retried).
type hcReceiver struct {
	*httptest.Server
	delay time.Duration

	mu     sync.Mutex
	cond   *sync.Cond
	pings  []hcPing
	events []map[string]any
	posts  int
}

func newHCReceiver(t *testing.T, delay time.Duration) *hcReceiver {
	rc := &hcReceiver{delay: delay}
	rc.cond = sync.NewCond(&rc.mu)
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		time.Sleep(rc.delay) // the slow monitor
		rc.mu.Lock()
		defer rc.mu.Unlock()
		defer rc.cond.Broadcast()
		switch {
		case strings.HasPrefix(r.URL.Path, "/ping/"+hcToken):
			what := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/ping/"+hcToken), "/")
			if what == "" {
				what = "success"
			}
			rc.pings = append(rc.pings, hcPing{What: what, RID: r.URL.Query().Get("rid")})
		case r.URL.Path == "/hook/"+hcToken:
			rc.posts++
			if rc.posts == 1 {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			var ev map[string]any
			if err := json.Unmarshal(body, &ev); err != nil {
				t.Errorf("webhook body %q: %v", body, err)
			}
			rc.events = append(rc.events, ev)
		default:
			t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

// waitFor waits until cond (called under the lock) holds.
func (rc *hcReceiver) waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	timer := time.AfterFunc(timeout, func() { rc.mu.Lock(); rc.cond.Broadcast(); rc.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v (%d pings, %d events)", what, timeout, len(rc.pings), len(rc.events))
		}
		rc.cond.Wait()
	}
}

// count is how many pings are what (under the lock).
func (rc *hcReceiver) count(what func(string) bool) int {
	n := 0
	for _, p := range rc.pings {
		if what(p.What) {
			n++
		}
	}
	return n
}

func isResult(w string) bool { return w != "start" }

// TestNotifyThreeNodes: each tick gives exactly one start and one result
// ping, paired by rid, from the node that ran it, while the monitor takes
// longer to answer than a tick lasts; a failing job pings /<exit status>;
// a streak of failures gives one failure notification and one recovery
// (the webhook's first answer is a 500: retried); the secrets of the URLs
// never reach a log.
func TestNotifyThreeNodes(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *Backend) {
		rc := newHCReceiver(t, 1500*time.Millisecond)
		dir := t.TempDir()
		ledgerFile, codeFile := filepath.Join(dir, "ledger"), filepath.Join(dir, "code")
		writeFile(t, codeFile, "0")
		cfg := filepath.Join(dir, "bext.config.toml")
		writeFile(t, cfg, fmt.Sprintf(`shutdown_grace = "5s"
%s
[notify]
url = "%s/hook/%s"

[[scheduled]]
id = "pinged"
cron = "*/1 * * * * *"
hint = "require_global"
expected_runtime = "1s"
ping_url = "%s/ping/%s"
command = ["/bin/sh", "-c", "echo $BEXT_TICK_TIME >> %s; exit $(cat %s)"]
`, b.Section(time.Second, time.Second), rc.URL, hcToken, rc.URL, hcToken, ledgerFile, codeFile))

		var nodes []*proctest.Node
		for i := range 3 {
			nodes = append(nodes, proctest.Start(t, bextBin, []string{"E2E_BACKEND_ADDR=" + b.Target},
				"run", "--config", cfg, "--node-id", fmt.Sprintf("node-%d", i+1), "--listen", "off"))
		}

		// 30 ticks of successes.
		started := time.Now()
		rc.waitFor(t, "30 result pings", 90*time.Second, func() bool { return rc.count(isResult) >= 30 })
		elapsed := time.Since(started)

		// Exit status 3 for 5 runs, then success again.
		writeFile(t, codeFile, "3")
		rc.waitFor(t, "5 /3 pings", 60*time.Second, func() bool { return rc.count(func(w string) bool { return w == "3" }) >= 5 })
		writeFile(t, codeFile, "0")
		rc.waitFor(t, "the recovery notification", 60*time.Second, func() bool {
			for _, ev := range rc.events {
				if ev["event"] == "recovery" {
					return true
				}
			}
			return false
		})
		// A few more ticks, so a late duplicate notification would show.
		rc.mu.Lock()
		more := rc.count(isResult) + 3
		rc.mu.Unlock()
		rc.waitFor(t, "3 more result pings", 30*time.Second, func() bool { return rc.count(isResult) >= more })
		for _, n := range nodes {
			n.Signal(15)
		}
		for _, n := range nodes {
			if code := n.Wait(30 * time.Second); code != 0 {
				t.Errorf("node exited %d", code)
			}
		}

		// The ledger: every tick once.
		raw, err := os.ReadFile(ledgerFile)
		if err != nil {
			t.Fatal(err)
		}
		ticks := map[string]bool{}
		for _, tick := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			if ticks[tick] {
				t.Errorf("tick %s ran twice", tick)
			}
			ticks[tick] = true
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		// Every run's pings: its start, then its result, under one rid.
		byRID := map[string][]string{}
		for _, p := range rc.pings {
			byRID[p.RID] = append(byRID[p.RID], p.What)
		}
		runs := map[string]bool{}
		var bad []string
		for r, w := range byRID {
			runs[r] = true
			if len(w) != 2 || w[0] != "start" || !isResult(w[1]) || !uuidRE.MatchString(r) {
				bad = append(bad, fmt.Sprintf("%s: %v", r, w))
			}
		}
		sort.Strings(bad)
		if len(bad) > 0 {
			t.Errorf("%d of %d rids without exactly a start then a result ping: %v", len(bad), len(byRID), bad)
		}
		if len(byRID) != len(ticks) {
			t.Errorf("%d ticks ran, %d runs pinged: want one run's pings per tick", len(ticks), len(byRID))
		}
		if n := rc.count(func(w string) bool { return w == "fail" }); n > 0 {
			t.Errorf("%d /fail pings; a job's exit status should be sent as /3", n)
		}
		t.Logf("%d ticks run, %d pings; the first 30 results in %v with a monitor answering in 1.5s", len(ticks), len(rc.pings), elapsed)
		if elapsed > 45*time.Second {
			t.Errorf("30 ticks took %v: the slow monitor delayed them", elapsed)
		}

		// One failure notification, then one recovery.
		var kinds []string
		for _, ev := range rc.events {
			kinds = append(kinds, fmt.Sprint(ev["event"]))
		}
		if strings.Join(kinds, ",") != "failure,recovery" {
			// One per node instead means the nodes decided on their own runs:
			// the backend keeps no run history (cluster.Store), or no agent
			// records the runs in it.
			t.Fatalf("webhook events %v, want exactly failure then recovery; events: %v", kinds, rc.events)
		}
		f := rc.events[0]
		if f["schedule"] != "pinged" || f["result"] != "failure" || f["attempts"] != float64(1) ||
			!runs[rid(fmt.Sprint(f["run_id"]))] || !strings.HasPrefix(fmt.Sprint(f["node"]), "node-") ||
			!strings.Contains(fmt.Sprint(f["error"]), "exited with code 3") || f["tick"] == nil {
			t.Errorf("failure event %v", f)
		}
		if rc.posts != 3 {
			t.Errorf("%d webhook POSTs, want 3 (the failure's first attempt got a 500 and was retried)", rc.posts)
		}
		for _, n := range nodes {
			if strings.Contains(n.Log(), hcToken) {
				t.Errorf("a node logged the ping or webhook URL's secret")
			}
		}
	})
}

var (
	hexID  = regexp.MustCompile(`^[0-9a-f]{32}$`)
	uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// rid is a run id as the ping's rid (a UUID).
func rid(id string) string {
	if !hexID.MatchString(id) {
		return id
	}
	return id[:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:]
}
