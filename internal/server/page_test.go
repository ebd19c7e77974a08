package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Operator input that must show as text, never as markup: a schedule id,
// a node id, an error line and an output tail.
const (
	evilID     = `<script>window.pwned=1</script>`
	evilNode   = `node-<img src=x onerror=window.pwned=2>`
	evilError  = `exit 1: <script>document.title="pwned"</script>`
	evilOutput = `</pre><img src=x onerror="window.pwned=3"><script>window.pwned=4</script>`
)

// pageFixture is a page handler over a memory store holding schedules
// "job" and evilID, runs, two drifting nodes and a pause.
type pageFixture struct {
	h         http.Handler
	st        ops.Store
	now       time.Time
	markAhead time.Time // job's tick mark
}

func newPageFixture(t testing.TB, token, readToken string, n, runs int) *pageFixture {
	t.Helper()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := opstest.Memory(t)
	spec, err := cronspec.Parse("*/5 * * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"job", evilID}
	for i := len(ids); i < n; i++ {
		ids = append(ids, fmt.Sprintf("schedule-%04d", i))
	}
	defs := make([]scheduler.Schedule, len(ids))
	for i, id := range ids {
		defs[i] = scheduler.Schedule{ID: id, CronExpr: "*/5 * * * *", Spec: spec}
	}
	defs[1].Nodes = []string{"role=<b>db"} // no node has it: flagged, escaped
	ctx := context.Background()
	tail := strings.Repeat("x", cluster.MaxOutputTail-len(evilOutput)) + evilOutput
	for _, id := range ids {
		var rs []cluster.Run
		for j := range runs {
			start := now.Add(-time.Duration(runs-j) * 5 * time.Minute)
			r := cluster.Run{Schedule: id, Tick: start, Node: evilNode, Result: "success", StartedAt: start,
				Duration: time.Duration(j+1) * 100 * time.Millisecond, Fence: int64(j + 1), Attempts: 1,
				RunID: fmt.Sprintf("%s-%d", id, j), OutputTail: tail}
			if j == runs-1 {
				r.Result, r.Error = "failure", evilError
			}
			rs = append(rs, r)
		}
		if err := st.RecordRuns(ctx, rs, cluster.DefaultKeep); err != nil {
			t.Fatal(err)
		}
	}
	for i, node := range []string{evilNode, "node-b"} {
		hashes := map[string]string{"job": "h1", evilID: "h2"}
		if i == 1 {
			hashes["job"] = "h1-changed"
		}
		if err := st.Announce(ctx, cluster.Node{NodeID: node, Version: "v1.2.3", StartedAt: now.Add(-time.Hour),
			ConfigHash: fmt.Sprint("cfg", i), Schedules: hashes}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetPause(ctx, "job", locking.Pause{Paused: true, Note: "disk full <b>", Until: now.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// job's tick mark says a day after the backend's clock (the memory
	// store's is the machine's, as are the nodes' announcements above, by
	// which status bounds it): flagged.
	markAhead := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	if ans, err := st.(locking.TickLocker).TryLockTick(ctx, locking.TickRequest{Key: "job", Tick: markAhead, TTL: time.Minute,
		MaxSkew: 25 * time.Hour, Window: time.Minute}); err != nil || ans.Handle == nil {
		t.Fatalf("raising job's mark: %v, %v", ans.Verdict, err)
	}
	svc := ops.New(st, defs, ops.Options{Clock: func() time.Time { return now }})
	s := New("127.0.0.1:0", nil, nil, slog.New(slog.DiscardHandler), WithAPI(APIConfig{Ops: svc, Token: token, ReadToken: readToken}))
	return &pageFixture{h: s.srv.Handler, st: st, now: now, markAhead: markAhead}
}

// get serves one request in process and returns the answer.
func (f *pageFixture) get(t testing.TB, path string, hdr ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t testing.TB, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var nonceRE = regexp.MustCompile(`<script nonce="([^"]+)" src="/assets/page.js"`)

// TestPageEscapesOperatorInput: ids, node ids, error lines and output
// tails show as text on both pages, and the CSP allows only the script
// carrying this answer's nonce.
func TestPageEscapesOperatorInput(t *testing.T) {
	f := newPageFixture(t, writeTok, "", 2, 3)
	seen := map[string]bool{}
	for _, path := range []string{"/", "/schedules/" + url.PathEscape(evilID), "/schedules/job", "/?part=main"} {
		r := f.get(t, path)
		b := body(t, r)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, r.StatusCode, b)
		}
		for _, raw := range []string{evilID, evilNode, evilError, evilOutput, "<img", "<script>", "<b>"} {
			if strings.Contains(b, raw) {
				t.Errorf("GET %s: the answer holds %q unescaped", path, raw)
			}
		}
		if strings.Count(b, "<script") > 1 {
			t.Errorf("GET %s: more than the page's own script:\n%s", path, b)
		}
		csp := r.Header.Get("Content-Security-Policy")
		if path == "/?part=main" {
			if strings.Contains(b, "<html") || strings.Contains(b, "<script") {
				t.Errorf("?part=main answered more than <main>'s content")
			}
			continue
		}
		m := nonceRE.FindStringSubmatch(b)
		if m == nil {
			t.Fatalf("GET %s: no nonced script tag", path)
		}
		if !strings.Contains(csp, "script-src 'nonce-"+m[1]+"'") || !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("GET %s: CSP %q does not allow only nonce %s", path, csp, m[1])
		}
		if seen[m[1]] {
			t.Errorf("nonce %s used twice", m[1])
		}
		seen[m[1]] = true
		if got := r.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q", path, got)
		}
	}
	b := body(t, f.get(t, "/schedules/"+url.PathEscape(evilID)))
	for _, escaped := range []string{"&lt;script&gt;window.pwned=1&lt;/script&gt;", "node-&lt;img src=x onerror=window.pwned=2&gt;",
		"&lt;/pre&gt;&lt;img src=x onerror=&#34;window.pwned=3&#34;&gt;"} {
		if !strings.Contains(b, escaped) {
			t.Errorf("the detail page does not show %q as text", escaped)
		}
	}
}

// TestPageShowsState: pause note and end, drift naming the schedule and
// the nodes, the last run's result colour, the chart, unknown ids.
func TestPageShowsState(t *testing.T) {
	f := newPageFixture(t, writeTok, "", 2, 3)
	b := body(t, f.get(t, "/"))
	for _, want := range []string{
		`<span class="tag paused">paused</span> <q class="note">disk full &lt;b&gt;</q>`,
		`until <time datetime="2026-03-01T14:00:00Z">`,
		`<span class="tag bad mark-ahead" title="the tick mark lies ahead of the clock: no tick of this schedule runs before it">mark ahead: <time datetime="` + f.markAhead.UTC().Format(time.RFC3339) + `">`,
		`<span class="tag bad">1 mark ahead</span>`,
		`<span class="tag bad">1 no node</span>`,
		`no node has <code>role=&lt;b&gt;db</code></span>`,
		`<section class="banner warn" id="drift">`,
		`<a href="/schedules/job">job</a>: <code>h1</code> on <span class="node">node-&lt;img src=x onerror=window.pwned=2&gt;</span>; <code>h1-changed</code> on <span class="node">node-b</span>`,
		`<tr class="sched last-bad is-paused" data-id="job">`,
		`<span class="res bad">failure</span>`,
		`<time datetime="2026-03-01T12:05:00Z">2026-03-01T12:05:00Z</time> <span class="rel">in 5m</span>`,
		`<td>v1.2.3</td><td>1h</td>`,
		`data-action="resume" data-id="job"`,
		`<tr class="sched last-bad" data-id="&lt;script&gt;`,
	} {
		if !strings.Contains(b, want) {
			t.Errorf("GET / lacks %s", want)
		}
	}
	b = body(t, f.get(t, "/schedules/job"))
	if n := strings.Count(b, `<rect class="bar `); n != 3 {
		t.Errorf("the chart has %d bars, want 3", n)
	}
	// Oldest on the left, tallest the slowest (the newest here): the last
	// bar is the failure at full height.
	if !strings.Contains(b, `<rect class="bar bad" x="400" y="0" width="199" height="120">`) {
		t.Errorf("the chart's last bar is not the newest, slowest, failed run:\n%s", b)
	}
	if r := f.get(t, "/schedules/nope"); r.StatusCode != http.StatusNotFound {
		t.Errorf("unknown schedule: %d", r.StatusCode)
	}
	if r := f.get(t, "/assets/page.html"); r.StatusCode != http.StatusNotFound {
		t.Errorf("the template is served as an asset: %d", r.StatusCode)
	}
	for _, a := range []string{"/assets/page.js", "/assets/page.css", "/assets/favicon.svg"} {
		if r := f.get(t, a); r.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", a, r.StatusCode)
		}
	}
}

// TestPageShowsLiveWork: what runs now ("running on node-c for 12s", one
// line per node running it), the queue (kind, tick or range, who, when;
// the list shows the first three and links to the rest), and per node its
// readiness, clock offset (marked past the alert's threshold, "unmeasured"
// when null) and last seen.
func TestPageShowsLiveWork(t *testing.T) {
	t.Parallel()
	f := newPageFixture(t, writeTok, "", 2, 1)
	ctx := context.Background()
	hashes := map[string]string{"job": "h1", evilID: "h2"}
	plus, minus := 12*time.Millisecond, -1500*time.Millisecond
	for _, n := range []cluster.Node{
		{NodeID: "node-c", Ready: true, ClockOffset: &plus, Running: []cluster.Running{
			{Schedule: "job", Tick: f.now.Add(-time.Minute), RunID: "run-c", StartedAt: f.now.Add(-12 * time.Second), Attempt: 2}}},
		{NodeID: "node-d", ClockOffset: &minus, Running: []cluster.Running{
			{Schedule: "job", Tick: f.now, RunID: "run-d", StartedAt: f.now.Add(-3 * time.Minute), Attempt: 1}}},
	} {
		n.Version, n.StartedAt, n.ConfigHash, n.Schedules = "v1.2.3", f.now.Add(-time.Hour), "cfg0", hashes
		if err := f.st.Announce(ctx, n, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	at := f.now.Add(-3 * time.Minute)
	reqs := []cluster.Request{{ID: "q1", Schedule: "job", Tick: at, By: "alice@host", At: at}}
	for i := range 3 {
		tick := time.Date(2026, 2, 28, 0, 5*i, 0, 0, time.UTC)
		reqs = append(reqs, cluster.Request{ID: fmt.Sprint("b", i), Schedule: "job", Tick: tick, Backfill: true, By: "bob@ops", At: at.Add(time.Minute)})
	}
	for i := range 3 {
		reqs = append(reqs, cluster.Request{ID: fmt.Sprint("q", i+2), Schedule: "job", Tick: at, By: "api 127.0.0.1", At: at.Add(2 * time.Minute)})
	}
	if err := f.st.Enqueue(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	if err := f.st.RecordAction(ctx, cluster.Action{Schedule: "job", Kind: "stop", By: "carol@desk", At: f.now.Add(-time.Minute)}, 10); err != nil {
		t.Fatal(err)
	}

	trigger := `<div class="queued"><span class="tag">trigger</span> <time datetime="2026-03-01T11:57:00Z">2026-03-01T11:57:00Z</time> by <span class="who">alice@host</span>, queued <time datetime="2026-03-01T11:57:00Z" title="2026-03-01T11:57:00Z">3m ago</time></div>`
	backfill := `<div class="queued"><span class="tag">backfill</span> <time datetime="2026-02-28T00:00:00Z">2026-02-28T00:00:00Z</time> to <time datetime="2026-02-28T00:10:00Z">2026-02-28T00:10:00Z</time> by <span class="who">bob@ops</span>, queued <time datetime="2026-03-01T11:58:00Z" title="2026-03-01T11:58:00Z">2m ago</time></div>`
	running := []string{
		`>running on <span class="node">node-c</span> for <span class="dur">12s</span>, attempt 2</div>`,
		`>running on <span class="node">node-d</span> for <span class="dur">3m</span></div>`,
	}
	list := body(t, f.get(t, "/"))
	for _, want := range append([]string{
		`<span class="tag run">1 running</span> <span class="tag">1 queued</span></h2>`,
		trigger, backfill,
		`<div class="more"><a href="/schedules/job">2 more queued</a></div>`,
		`<tr data-node="node-c"><td class="id">node-c</td>
<td class="ready"><span class="tag good">ready</span></td>`,
		`<td class="offset"><span class="dur" title="the node clock minus the backend clock">&#43;12ms</span></td>`,
		`<tr data-node="node-d"><td class="id">node-d</td>
<td class="ready"><span class="tag bad">not ready</span></td>`,
		`<td class="offset"><span class="dur tag warn" title="the node clock minus the backend clock">-1.5s</span></td>`,
		`<td class="offset"><span class="none" title="the node has not measured it (the backend has no clock)">unmeasured</span></td>`,
		`<td class="seen"><time datetime="`,
		`<div class="acted">stop by <span class="who">carol@desk</span> <time datetime="2026-03-01T11:59:00Z" title="2026-03-01T11:59:00Z">1m ago</time></div>`,
	}, running...) {
		if !strings.Contains(list, want) {
			t.Errorf("GET / lacks %s", want)
		}
	}
	if n := strings.Count(list, `<div class="queued">`); n != pageQueueShown {
		t.Errorf("the list shows %d queued entries, want %d", n, pageQueueShown)
	}
	// The other schedule is idle: its cell is empty.
	if !strings.Contains(list, `<td class="now"></td>`) {
		t.Errorf("an idle schedule's running/queued cell is not empty")
	}

	detail := body(t, f.get(t, "/schedules/job"))
	for _, want := range append([]string{trigger, backfill}, running...) {
		if !strings.Contains(detail, want) {
			t.Errorf("GET /schedules/job lacks %s", want)
		}
	}
	if n := strings.Count(detail, `<div class="queued">`); n != 5 {
		t.Errorf("the schedule's page shows %d queued entries, want all 5", n)
	}
	idle := body(t, f.get(t, "/schedules/"+url.PathEscape(evilID)))
	for _, want := range []string{`<dd class="now"><span class="none">not running</span></dd>`, `<dd class="queue"><span class="none">nothing</span></dd>`} {
		if !strings.Contains(idle, want) {
			t.Errorf("an idle schedule's page lacks %s", want)
		}
	}
}

// TestFmtOffset: a clock offset reads with its sign, to the millisecond.
func TestFmtOffset(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sec  float64
		want string
	}{{0, "0ms"}, {-0.0003, "0ms"}, {0.0004, "0ms"}, {0.0006, "+1ms"}, {0.012, "+12ms"}, {-1.5, "-1.5s"}, {-0.9996, "-1.0s"}, {75, "+1m 15s"}} {
		if got := fmtOffset(c.sec); got != c.want {
			t.Errorf("fmtOffset(%v) = %q, want %q", c.sec, got, c.want)
		}
	}
}

// TestPageFilterBox: the list's filter box is for JavaScript only (hidden
// without it) and the list comes whole, no row hidden by the server; a
// schedule's page has no box.
func TestPageFilterBox(t *testing.T) {
	t.Parallel()
	f := newPageFixture(t, writeTok, "", 5, 1)
	list := body(t, f.get(t, "/"))
	if !regexp.MustCompile(`<span class="filter js-only"><label for="filter">filter</label> <input id="filter" type="search"`).MatchString(list) {
		t.Errorf("GET / has no filter box for JavaScript only")
	}
	if n := strings.Count(list, `<tr class="sched`); n != 5 {
		t.Errorf("GET / lists %d schedules, want all 5", n)
	}
	if regexp.MustCompile(`<tr[^>]* hidden`).MatchString(list) {
		t.Errorf("GET / hides a row without JavaScript")
	}
	if strings.Contains(body(t, f.get(t, "/schedules/job")), `id="filter"`) {
		t.Errorf("a schedule's page has a filter box")
	}
}

// TestPageLongIDTitle: an id too long for the list's column carries its
// whole self as the link's title (the CSS ends it in an ellipsis).
func TestPageLongIDTitle(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("long-id-", 6)
	if len(long) <= pageIDShown {
		t.Fatalf("test id %q is not long", long)
	}
	svc := ops.New(opstest.Memory(t), []scheduler.Schedule{{ID: long, CronExpr: "@daily"}, {ID: "short", CronExpr: "@daily"}},
		ops.Options{})
	s := New("127.0.0.1:0", nil, nil, slog.New(slog.DiscardHandler), WithAPI(APIConfig{Ops: svc}))
	f := &pageFixture{h: s.srv.Handler}
	b := body(t, f.get(t, "/"))
	if !strings.Contains(b, `<a href="/schedules/`+long+`" title="`+long+`">`+long+`</a>`) {
		t.Errorf("the long id's link has no title:\n%s", b)
	}
	if !strings.Contains(b, `<a href="/schedules/short">short</a>`) {
		t.Errorf("the short id's link has a title, or is missing")
	}
}

// TestPageReadToken: with read_token the page asks for it by HTTP Basic
// (any user, the token as password) and takes a bearer too; the write
// token reads as well; a wrong one is 401.
func TestPageReadToken(t *testing.T) {
	f := newPageFixture(t, writeTok, readTok, 2, 1)
	basic := func(user, pass string) []string {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.SetBasicAuth(user, pass)
		return []string{"Authorization", req.Header.Get("Authorization")}
	}
	for _, c := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"none", nil, http.StatusUnauthorized},
		{"basic wrong", basic("op", "nope"), http.StatusUnauthorized},
		{"basic write token as user", basic(readTok, ""), http.StatusUnauthorized},
		{"basic read", basic("op", readTok), http.StatusOK},
		{"basic write", basic("", writeTok), http.StatusOK},
		{"bearer read", []string{"Authorization", "Bearer " + readTok}, http.StatusOK},
		{"bearer wrong", []string{"Authorization", "Bearer nope"}, http.StatusUnauthorized},
	} {
		for _, path := range []string{"/", "/schedules/job", "/?part=main"} {
			r := f.get(t, path, c.hdr...)
			b := body(t, r)
			if r.StatusCode != c.want {
				t.Errorf("%s: GET %s: %d, want %d", c.name, path, r.StatusCode, c.want)
			}
			if c.want == http.StatusUnauthorized {
				if !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Basic ") || strings.Contains(b, "job") {
					t.Errorf("%s: GET %s: 401 without a Basic challenge, or leaking: %q %q", c.name, path, r.Header.Get("WWW-Authenticate"), b)
				}
			}
		}
	}
	// The assets hold no cluster state: they load before the prompt.
	if r := f.get(t, "/assets/page.css"); r.StatusCode != http.StatusOK {
		t.Errorf("assets behind the read token: %d", r.StatusCode)
	}
}

// BenchmarkStatusPage renders GET / and a detail page from a memory store
// with 1,000 schedules and full history (keep = 100 runs each, every run
// with a full 4 KiB output tail), reporting the page's size.
func BenchmarkStatusPage(b *testing.B) {
	f := newPageFixture(b, writeTok, "", 1000, cluster.DefaultKeep)
	for _, path := range []string{"/", "/schedules/job"} {
		for _, enc := range []string{"identity", "gzip"} {
			b.Run(path+"/"+enc, func(b *testing.B) {
				var size int
				for b.Loop() {
					r := f.get(b, path, "Accept-Encoding", enc)
					size = len(body(b, r))
					if r.StatusCode != http.StatusOK {
						b.Fatalf("GET %s: %d", path, r.StatusCode)
					}
				}
				b.ReportMetric(float64(size), "page-bytes")
			})
		}
	}
}
