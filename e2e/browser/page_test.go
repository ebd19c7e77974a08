package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/internal/proctest"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

const apiToken = "page-tok-3c9e7a1f5b2d"

var addrRE = regexp.MustCompile(`serving metrics and health.*addr=(\S+)`)

// startNode runs the built binary with config body (its [http] and
// node_id are added here) and returns its base URL once it serves.
func startNode(t *testing.T, nodeID, body string, env ...string) (*proctest.Node, string) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg := filepath.Join(t.TempDir(), "bext.config.toml")
	conf := fmt.Sprintf("node_id = %q\nshutdown_grace = \"2s\"\n[http]\nlisten = %q\ntoken = \"${BEXT_TEST_API_TOKEN}\"\nread_token = \"${BEXT_TEST_READ_TOKEN:-}\"\n%s", nodeID, addr, body)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	n := proctest.Start(t, bin, append([]string{"BEXT_TEST_API_TOKEN=" + apiToken}, env...), "run", "--config", cfg)
	n.WaitLog(addrRE, 60*time.Second)
	t.Cleanup(func() {
		n.Signal(syscall.SIGTERM)
		if code := n.Wait(20 * time.Second); code != 0 {
			t.Errorf("node exit %d", code)
		}
	})
	return n, "http://" + addr
}

// pageSchedules: "report" and "cleanup" never fire by themselves in the
// test (yearly), so a run of report can only come from the trigger;
// "heartbeat" fires every second and fills a history.
const pageSchedules = `
[[scheduled]]
id = "report"
cron = "0 0 1 1 *"
hint = "require_global"
command = ["/bin/sh", "-c", "sleep 0.2; echo report-ran"]
[[scheduled]]
id = "cleanup"
cron = "0 0 1 1 *"
timezone = "Europe/Berlin"
command = ["/bin/sh", "-c", "echo cleanup-ran"]
[[scheduled]]
id = "heartbeat"
cron = "*/1 * * * * *"
command = ["/bin/sh", "-c", "echo beat"]
`

// TestStatusPage, on a real node (memory backend, then Redis): the page
// loads without errors, lists the node's schedules and itself; trigger
// asks for the token once, a wrong one shows the API's error and is
// forgotten, the right one makes a run appear on the next refresh; pause
// shows as paused without asking again; a schedule's page shows its runs
// and the duration chart. The token goes only in an Authorization header.
func TestStatusPage(t *testing.T) {
	backends := []struct {
		name    string
		locking func(t *testing.T) string
	}{
		{"memory", func(*testing.T) string { return "[locking]\nbackend = \"memory\"\n" }},
		{"redis", func(t *testing.T) string { toml, _ := opstest.Shared()[0].New(t); return toml }},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			n, base := startNode(t, "page-node-"+be.name, be.locking(t)+pageSchedules)
			n.WaitLog(regexp.MustCompile(`beat`), 30*time.Second)
			b := newBrowser(t)

			b.run("loading /", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#schedules")))
			// The node announces itself and records heartbeat's runs:
			// wait for the refresh to show both.
			b.waitJS("the node and a heartbeat run", `document.querySelector('tr[data-node="page-node-`+be.name+`"]') !== null &&
				document.querySelector('tr[data-id="heartbeat"] .last .res.good') !== null`, 30*time.Second)
			for _, id := range []string{"report", "cleanup", "heartbeat"} {
				if !evalAs[bool](b, `document.querySelector('tr[data-id="`+id+`"] a[href="/schedules/`+id+`"]') !== null`) {
					t.Errorf("schedule %s is not listed", id)
				}
			}
			if got := evalAs[string](b, `document.querySelector('tr[data-id="cleanup"]').textContent`); !strings.Contains(got, "Europe/Berlin") ||
				!strings.Contains(got, "0 0 1 1 *") || !strings.Contains(got, "prefer_global") || !strings.Contains(got, "active") {
				t.Errorf("cleanup's row lacks its zone, cron, hint or state: %q", got)
			}
			if got := evalAs[string](b, `document.querySelector('tr[data-id="report"] .last').textContent`); !strings.Contains(got, "no run recorded") {
				t.Fatalf("report has a run before the trigger: %q", got)
			}
			b.noErrors("loading the page")
			b.shot("status-page")

			// Trigger without a token: the page asks; a wrong token shows
			// the API's refusal.
			b.run("trigger, wrong token",
				chromedp.Click(chromedp.CSS(`tr[data-id="report"] button[data-action="trigger"]`)),
				chromedp.WaitVisible(chromedp.CSS("#token")),
				chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"),
				chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
			)
			b.waitJS("the refusal", `document.querySelector('#msg.error') !== null &&
				document.querySelector('#msg').textContent.includes('HTTP 401') &&
				document.querySelector('#msg').textContent.includes('wrong token')`, 15*time.Second)
			b.shot("wrong-token")
			if got := evalAs[string](b, `document.querySelector('tr[data-id="report"] .last').textContent`); !strings.Contains(got, "no run recorded") {
				t.Errorf("a refused trigger ran: %q", got)
			}

			// The wrong token was forgotten: trigger asks again.
			b.run("trigger, right token",
				chromedp.Click(chromedp.CSS(`tr[data-id="report"] button[data-action="trigger"]`)),
				chromedp.WaitVisible(chromedp.CSS("#token")),
				chromedp.SendKeys(chromedp.CSS("#token"), apiToken),
				chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
			)
			b.waitJS("the acceptance", `document.querySelector('#msg.ok') !== null &&
				document.querySelector('#msg').textContent.includes('accepted by node page-node-`+be.name+`')`, 20*time.Second)
			// The run shows on an automatic refresh (the page is not
			// reloaded: the message above stays).
			b.waitJS("report's run", `document.querySelector('tr[data-id="report"] .last .res.good') !== null &&
				document.querySelector('tr[data-id="report"] .last').textContent.includes('manual')`, 30*time.Second)
			if !evalAs[bool](b, `document.querySelector('#msg.ok') !== null`) {
				t.Errorf("the refresh lost the operator's message")
			}

			// Pause: no second prompt; the row shows paused.
			b.run("pause", chromedp.Click(chromedp.CSS(`tr[data-id="cleanup"] button[data-action="pause"]`)))
			b.waitJS("cleanup paused", `document.querySelector('tr[data-id="cleanup"] .state .tag.paused') !== null &&
				document.querySelector('tr[data-id="cleanup"] button[data-action="resume"]') !== null`, 15*time.Second)
			if evalAs[bool](b, `!document.querySelector('#token-form').hidden`) {
				t.Errorf("pause asked for the token again")
			}
			b.shot("paused")

			// The token travelled only as a bearer header, never in a URL,
			// and lives in this tab only.
			var posts int
			for _, r := range b.Requests() {
				if strings.Contains(r.URL, apiToken) || strings.Contains(r.URL, "not-the-token") {
					t.Errorf("a token in a URL: %s", r.URL)
				}
				if r.Method == "POST" {
					posts++
					if h, _ := r.Headers["Authorization"].(string); !strings.HasPrefix(h, "Bearer ") {
						t.Errorf("POST %s without a bearer header: %v", r.URL, r.Headers)
					}
				}
			}
			if posts != 3 {
				t.Errorf("%d POSTs, want 3 (wrong trigger, trigger, pause)", posts)
			}
			if got := evalAs[string](b, `localStorage.length + "|" + document.cookie`); got != "0|" {
				t.Errorf("the token is kept beyond the tab: localStorage/cookies %q", got)
			}

			// A schedule's page: its runs and the chart.
			b.run("report's page", chromedp.Click(chromedp.CSS(`tr[data-id="report"] a`)), chromedp.WaitVisible(chromedp.CSS("#runs")))
			b.waitJS("report's run row", `document.querySelectorAll('#runs tr.run').length === 1 &&
				document.querySelector('#runs tr.run').textContent.includes('page-node-`+be.name+`') &&
				document.querySelectorAll('svg.chart rect.bar.good').length === 1`, 15*time.Second)
			b.run("heartbeat's page", chromedp.Navigate(base+"/schedules/heartbeat"), chromedp.WaitVisible(chromedp.CSS("svg.chart")))
			if n := evalAs[int](b, `document.querySelectorAll('svg.chart rect.bar').length`); n < 1 {
				t.Errorf("heartbeat's chart has %d bars", n)
			}
			b.shot("schedule-page")
			// Allowed: the 401 the wrong token provoked, logged by the
			// browser as a failed load.
			b.noErrors("using the page", "status of 401")
		})
	}
}

// TestStatusPageEscapesOperatorInput: a schedule id, a job's error line
// and its output carrying <script> and an onerror image are shown as
// text; nothing runs (the scripts would set window.pwned and the title),
// and the CSP had nothing to block.
func TestStatusPageEscapesOperatorInput(t *testing.T) {
	// The command's path carries <script>: its exit error names it, so
	// the error line does.
	dir := filepath.Join(t.TempDir(), `<script>window.pwned=2;document.title='pwned'<`)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := filepath.Join(dir, `script>`)
	script := "#!/bin/sh\necho '<img src=x onerror=\"window.pwned=3;document.title=1\">'\necho '<script>window.pwned=4</script>'\nexit 1\n"
	if err := os.WriteFile(cmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	evilID := `<script>window.pwned=1;document.title='pwned'</script><img src=x onerror="window.pwned=5">`
	n, base := startNode(t, "escape-node", fmt.Sprintf("[locking]\nbackend = \"memory\"\n[[scheduled]]\nid = %s\ncron = \"*/1 * * * * *\"\ncommand = [%s]\n",
		strconv.Quote(evilID), strconv.Quote(cmd)))
	n.WaitLog(regexp.MustCompile(`failed|failure`), 30*time.Second)
	b := newBrowser(t)

	b.run("loading /", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#schedules")))
	b.waitJS("the failed run", `document.querySelector('tr.sched .last .err') !== null`, 30*time.Second)
	row := evalAs[map[string]string](b, `(() => { const r = document.querySelector('tr.sched');
		return {id: r.dataset.id, link: r.querySelector('td.id a').textContent, err: r.querySelector('.last .err').textContent}; })()`)
	if row["id"] != evilID || row["link"] != evilID {
		t.Errorf("the id is not shown as text: %q", row)
	}
	if !strings.Contains(row["err"], "<script>window.pwned=2;document.title='pwned'</script>") {
		t.Errorf("the error line is not shown as text: %q", row["err"])
	}
	b.shot("escaping-status")

	// The schedule's page (through the link, so its id is escaped in the
	// URL too), with the output tail opened.
	b.run("the schedule's page", chromedp.Click(chromedp.CSS(`tr.sched td.id a`)), chromedp.WaitVisible(chromedp.CSS("#runs")))
	b.waitJS("a run with output", `document.querySelector('#runs details') !== null`, 15*time.Second)
	b.run("opening the output", chromedp.Click(chromedp.CSS(`#runs details summary`)))
	out := evalAs[string](b, `document.querySelector('#runs details pre').textContent`)
	if !strings.Contains(out, `<img src=x onerror="window.pwned=3;document.title=1">`) || !strings.Contains(out, `<script>window.pwned=4</script>`) {
		t.Errorf("the output tail is not shown as text: %q", out)
	}
	if got := evalAs[string](b, `document.querySelector('h2.id').textContent`); !strings.HasPrefix(got, evilID) {
		t.Errorf("the detail page's heading: %q", got)
	}
	// Let a refresh swap <main> in too: innerHTML of escaped markup.
	b.run("refreshing", evalJS(`document.querySelector('#schedule').dataset.old = '1'; window.bextRefresh()`))
	b.waitJS("the refreshed page", `document.querySelector('#schedule') !== null && !document.querySelector('#schedule').dataset.old`, 10*time.Second)
	b.shot("escaping-schedule")

	for _, page := range []string{base + "/", ""} {
		if page != "" {
			b.run("back to /", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#schedules")))
		}
		state := evalAs[map[string]any](b, `({pwned: typeof window.pwned, title: document.title,
			imgs: document.querySelectorAll('img').length, scripts: document.scripts.length})`)
		if state["pwned"] != "undefined" || strings.Contains(fmt.Sprint(state["title"]), "pwned") || state["title"] == "1" ||
			state["imgs"] != float64(0) || state["scripts"] != float64(1) {
			t.Errorf("operator input ran or became markup: %v", state)
		}
	}
	// Nothing was even blocked by the CSP: no markup reached the page.
	b.noErrors("showing operator input")
}

// TestStatusPageReadToken: with [http] read_token the page answers 401
// with a Basic challenge; the credentials the operator gives the
// browser's prompt (answered here through the DevTools protocol, as a
// person would in the dialog) open it, and the browser resends them by
// itself on the refresh's fetches.
func TestStatusPageReadToken(t *testing.T) {
	const readToken = "read-tok-9d8c7b6a"
	n, base := startNode(t, "read-node", "[locking]\nbackend = \"memory\"\n"+pageSchedules, "BEXT_TEST_READ_TOKEN="+readToken)
	n.WaitLog(regexp.MustCompile(`beat`), 30*time.Second)
	b := newBrowser(t)
	var prompts atomic.Int32
	var give atomic.Bool // the operator's answer to the prompt: cancel, then the token
	b.setOnEvent(func(ev any) {
		// Runs in the tab's loop: answer from a goroutine.
		switch e := ev.(type) {
		case *fetch.EventAuthRequired:
			prompts.Add(1)
			answer := &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth}
			if give.Load() {
				answer = &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials,
					Username: "operator", Password: readToken}
			}
			go func() {
				_, _ = chromedp.Call(b.ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: e.RequestID, AuthChallengeResponse: answer})
			}()
		case *fetch.EventRequestPaused:
			go func() {
				_, _ = chromedp.Call(b.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID})
			}()
		}
	})
	handleAuth := true
	if _, err := chromedp.Call(b.ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: &handleAuth}); err != nil {
		t.Fatal(err)
	}
	b.run("loading / and cancelling the prompt", chromedp.Navigate(base+"/"))
	if got := evalAs[string](b, `document.body.textContent`); !strings.Contains(got, "read_token") || strings.Contains(got, "heartbeat") {
		t.Fatalf("without the token the page shows %q", got)
	}
	if prompts.Load() != 1 {
		t.Errorf("the browser prompted %d times, want 1", prompts.Load())
	}
	give.Store(true)
	b.run("loading / with the token", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#schedules")))
	b.waitJS("heartbeat's runs", `document.querySelector('tr[data-id="heartbeat"] .last .res.good') !== null`, 30*time.Second)
	asked := prompts.Load()
	// A refresh (the page's fetch) goes through on the cached credentials.
	b.run("refreshing", evalJS(`document.querySelector('#schedules').dataset.old = '1'; window.bextRefresh()`))
	b.waitJS("the refreshed page", `document.querySelector('#schedules') !== null && !document.querySelector('#schedules').dataset.old`, 10*time.Second)
	if asked < 2 || prompts.Load() != asked {
		t.Errorf("the browser was asked for credentials %d times, then %d more on the refresh", asked, prompts.Load()-asked)
	}
	if _, err := chromedp.Call(b.ctx, fetch.Disable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	b.shot("read-token")
	b.noErrors("reading with the token", "status of 401")
}

// evalJS is an action that evaluates expr for its effect.
func evalJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](expr)(ctx, t)
		return err
	})
}
