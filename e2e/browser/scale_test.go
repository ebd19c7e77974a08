package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
)

// scaleSchedules is how many schedules TestStatusPageAtScale lists.
const scaleSchedules = 1000

// longID is an id far wider than a 400px column.
const longID = "nightly-postgres-backup-of-the-eu-west-1-billing-cluster-shard-0042"

// scaleConfig is 1,000 schedules that do not fire during the test (yearly
// and the like), with crons that hold spaces, zones that hold slashes and
// ids that hold hyphens: the tokens a narrow screen could break. "slow"
// runs only when the test asks it to, and holds its lock a minute.
func scaleConfig() string {
	crons := []string{"0 0 1 1 *", "15 3 1 1,7 *", "45 23 31 12 *", "30 4 1 1 1-5"}
	zones := []string{"UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Asia/Kolkata"}
	hints := []string{"prefer_global", "require_global", "node_local"}
	var b strings.Builder
	add := func(id, cron, zone, hint, cmd string) {
		fmt.Fprintf(&b, "[[scheduled]]\nid = %q\ncron = %q\ntimezone = %q\nhint = %q\ncommand = %s\n", id, cron, zone, hint, cmd)
	}
	add("slow", "0 0 1 1 *", "UTC", "require_global", `["/bin/sh", "-c", "sleep 60"]`)
	add(longID, "0 0 1 1 *", "America/Argentina/Buenos_Aires", "prefer_global", `["true"]`)
	for i := range scaleSchedules - 2 {
		add(scaleID(i), crons[i%len(crons)], zones[i%len(zones)], hints[i%len(hints)], `["true"]`)
	}
	return b.String()
}

func scaleID(i int) string { return fmt.Sprintf("schedule-%04d", i) }

// TestStatusPageAtScale: a node on Redis with 1,000 schedules, each with
// a recorded history (every tenth failing with an error line), one running
// with two requests queued behind it. The page renders every row, logs its
// render time and weight as Chromium measured them, shows the running run,
// the queue and the node's readiness, clock offset and last seen; the
// filter box hides the rows that do not match, with no request, and keeps
// doing so across a refresh. At a 400px viewport no token (id, node id,
// cron, zone, hint, time, duration, tag) spans two lines, on the list and
// on a schedule's page, and the page itself does not scroll sideways.
func TestStatusPageAtScale(t *testing.T) {
	t.Parallel()
	locking, st := opstest.Shared()[0].New(t)
	ctx := context.Background()

	// History first: every schedule's last runs, as nodes would have
	// written them.
	now := time.Now().UTC().Truncate(time.Second)
	ids := []string{"slow", longID}
	for i := range scaleSchedules - 2 {
		ids = append(ids, scaleID(i))
	}
	var runs []cluster.Run
	for i, id := range ids {
		for j := range 3 {
			start := now.Add(-time.Duration(3-j) * time.Hour)
			r := cluster.Run{Schedule: id, Tick: start, Node: "node-" + strconv.Itoa(j), Result: "success", StartedAt: start,
				Duration: time.Duration(i%50+j) * 100 * time.Millisecond, Fence: int64(j + 1), Attempts: 1,
				RunID: fmt.Sprintf("%s-%d", id, j), OutputTail: "done\n"}
			if j == 2 && i%10 == 0 {
				r.Result, r.Error = "failure", "exit status 1: pg_dump: error: connection to server failed"
			}
			runs = append(runs, r)
		}
	}
	if err := st.RecordRuns(ctx, runs, cluster.DefaultKeep); err != nil {
		t.Fatal(err)
	}

	const nodeID = "page-scale-node"
	n, base := startNode(t, nodeID, locking+scaleConfig())

	// slow runs (a trigger), and a backfill and a trigger wait behind its
	// lock: what the page shows as running and queued.
	if err := st.Enqueue(ctx, []cluster.Request{{ID: "run-now", Schedule: "slow", Tick: now, By: "ops@test", At: now}}); err != nil {
		t.Fatal(err)
	}
	n.WaitLog(regexp.MustCompile(`manual run accepted.*schedule=slow`), 30*time.Second)
	queued := []cluster.Request{
		{ID: "bf-1", Schedule: "slow", Tick: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), Backfill: true, By: "bob@ops", At: now},
		{ID: "bf-2", Schedule: "slow", Tick: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), Backfill: true, By: "bob@ops", At: now},
		{ID: "again", Schedule: "slow", Tick: now, By: "alice@host", At: now.Add(time.Second)},
	}
	if err := st.Enqueue(ctx, queued); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t)
	b.run("loading /", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#schedules")))
	// Render time and weight, as Chromium reports them (Navigation and
	// Paint Timing): logged for the note, asserted only against a generous
	// bound (the machine is shared). The first load also computes the
	// lost-tick summary the node then caches; the second is the refresh's
	// steady state.
	perf := loadTiming(t, b, "first load")
	b.run("reloading /", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#schedules")))
	loadTiming(t, b, "second load")
	// What of the first byte is the cluster's state and what the page's
	// rendering: the API answers the same status without a page.
	for _, path := range []string{"/api/v1/status", "/"} {
		start := time.Now()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t.Logf("GET %s from Go: %d, %d bytes in %v", path, resp.StatusCode, n, time.Since(start).Round(time.Millisecond))
	}
	if int(perf["rows"]) != scaleSchedules {
		t.Fatalf("the page lists %v schedules, want %d", perf["rows"], scaleSchedules)
	}
	if perf["load"] > 30000 {
		t.Errorf("the page took %.0f ms to load", perf["load"])
	}

	// Running now and the queue, on the list (the node announces its run
	// within a second; the page refreshes itself).
	b.waitJS("slow running", `(() => { const c = document.querySelector('tr[data-id="slow"] td.now');
		return c !== null && c.querySelectorAll('.running').length === 1 && c.querySelectorAll('.queued').length === 2; })()`, 30*time.Second)
	cell := evalAs[string](b, `document.querySelector('tr[data-id="slow"] td.now').textContent`)
	for _, want := range []string{"running on " + nodeID + " for ", "backfill 2024-01-01T00:00:00Z to 2025-01-01T00:00:00Z by bob@ops", "trigger", "by alice@host, queued "} {
		if !strings.Contains(cell, want) {
			t.Errorf("slow's running/queued cell lacks %q: %q", want, cell)
		}
	}
	if got := evalAs[string](b, `document.querySelector('#schedules h2').textContent`); !strings.Contains(got, "1 running") || !strings.Contains(got, "1 queued") {
		t.Errorf("the list's heading does not count the running and queued schedules: %q", got)
	}

	// The node: ready, its clock offset measured against Redis's, last
	// seen just now.
	b.waitJS("the node ready with an offset", `(() => { const r = document.querySelector('tr[data-node="`+nodeID+`"]');
		return r !== null && r.querySelector('.ready .tag.good') !== null && /^[+-]?\d/.test(r.querySelector('.offset').textContent); })()`, 30*time.Second)
	if seen := evalAs[string](b, `document.querySelector('tr[data-node="`+nodeID+`"] .seen time').textContent`); !regexp.MustCompile(`^(now|\d+(\.\d)?s ago)$`).MatchString(seen) {
		t.Errorf("the node's last seen reads %q", seen)
	}

	// The filter: typed, it shows the matching rows only, with no request.
	visible := `Array.from(document.querySelectorAll('tr.sched')).filter(r => r.getClientRects().length > 0).length`
	before := len(b.Requests())
	b.run("typing in the filter", chromedp.Click(chromedp.CSS("#filter")), chromedp.SendKeys(chromedp.CSS("#filter"), "schedule-07"))
	if got := evalAs[int](b, visible); got != 100 {
		t.Errorf("filtering on schedule-07 shows %d rows, want 100", got)
	}
	if got := evalAs[string](b, `document.getElementById('filter-count').textContent`); got != "100 of 1000" {
		t.Errorf("the filter's count reads %q", got)
	}
	for _, r := range b.Requests()[before:] {
		if !strings.Contains(r.URL, "part=main") { // the page's own refresh may fall in
			t.Errorf("filtering sent a request: %s %s", r.Method, r.URL)
		}
	}
	// A refresh swaps the rows: they are filtered before they show.
	b.run("refreshing", evalJS(`document.querySelector('#schedules').dataset.old = '1'; window.bextRefresh()`))
	b.waitJS("the refreshed page", `document.querySelector('#schedules') !== null && !document.querySelector('#schedules').dataset.old`, 20*time.Second)
	if got := evalAs[int](b, visible); got != 100 {
		t.Errorf("after a refresh the filter shows %d rows, want 100", got)
	}
	// Every word must match: "slow" and a word of its row.
	b.run("a second filter", chromedp.SendKeys(chromedp.CSS("#filter"), kb.Escape), chromedp.SendKeys(chromedp.CSS("#filter"), "SLOW running"))
	if got := evalAs[[]string](b, `Array.from(document.querySelectorAll('tr.sched')).filter(r => !r.hidden).map(r => r.dataset.id)`); len(got) != 1 || got[0] != "slow" {
		t.Errorf("filtering on \"SLOW running\" shows %q, want [slow]", got)
	}
	ms := evalAs[float64](b, `(() => { const f = document.getElementById('filter'); const t0 = performance.now();
		f.value = 'schedule-0'; f.dispatchEvent(new Event('input')); void document.body.offsetHeight;
		return performance.now() - t0; })()`)
	t.Logf("filtering %d rows (cold cache after the refresh) and laying the page out: %.0f ms", scaleSchedules, ms)
	b.run("clearing the filter", chromedp.SendKeys(chromedp.CSS("#filter"), kb.Escape))
	if got := evalAs[int](b, visible); got != scaleSchedules {
		t.Errorf("with the filter cleared %d rows show, want %d", got, scaleSchedules)
	}
	b.shot("scale-1280")
	t.Logf("at 1280px the schedules table (px, its width / its box's; then each column's): %s", evalAs[string](b,
		`(() => { const s = document.querySelector('#schedules .scroll'); return s.scrollWidth + ' / ' + s.clientWidth + '; ' + Array.from(s.querySelectorAll('th')).map(th => th.textContent + ' ' + th.offsetWidth).join(', '); })()`))

	// A narrow screen: no token breaks inside.
	b.run("a 400px viewport", chromedp.EmulateViewport(400, 800))
	b.run("reloading", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#schedules")))
	b.waitJS("slow running", `document.querySelector('tr[data-id="slow"] td.now .running') !== null`, 30*time.Second)
	checkTokens(t, b, "GET / at 400px", 10*scaleSchedules)
	b.shot("scale-400")
	b.run("the long id's page", chromedp.Navigate(base+"/schedules/"+longID), chromedp.WaitVisible(chromedp.CSS("#runs")))
	checkTokens(t, b, "GET /schedules/"+longID+" at 400px", 20)
	b.shot("schedule-400")
	b.run("slow's page", chromedp.Navigate(base+"/schedules/slow"), chromedp.WaitVisible(chromedp.CSS("#runs")))
	if got := evalAs[int](b, `document.querySelectorAll('#schedule dd.now .running').length + 10 * document.querySelectorAll('#schedule dd.queue .queued').length`); got != 21 {
		t.Errorf("slow's page shows %d running and %d queued, want 1 and 2", got%10, got/10)
	}
	checkTokens(t, b, "GET /schedules/slow at 400px", 20)
	b.noErrors("using the page at scale")
}

// loadTiming logs the page's load as Chromium measured it and returns
// the figures.
func loadTiming(t *testing.T, b *browser, what string) map[string]float64 {
	t.Helper()
	perf := evalAs[map[string]float64](b, `(() => {
		const n = performance.getEntriesByType('navigation')[0];
		const fcp = performance.getEntriesByName('first-contentful-paint')[0];
		let assets = 0;
		for (const r of performance.getEntriesByType('resource')) { assets += r.transferSize; }
		return {ttfb: n.responseStart - n.startTime, response: n.responseEnd - n.startTime,
			dcl: n.domContentLoadedEventEnd - n.startTime, load: n.loadEventEnd - n.startTime,
			fcp: fcp ? fcp.startTime : -1, transfer: n.transferSize, encoded: n.encodedBodySize,
			decoded: n.decodedBodySize, assets: assets,
			rows: document.querySelectorAll('tr.sched').length, elements: document.querySelectorAll('*').length};
	})()`)
	t.Logf("GET / at %d schedules, %s: first byte %.0f ms, response end %.0f ms, first contentful paint %.0f ms, DOMContentLoaded %.0f ms, load event %.0f ms",
		int(perf["rows"]), what, perf["ttfb"], perf["response"], perf["fcp"], perf["dcl"], perf["load"])
	t.Logf("GET / weight, %s: %.0f bytes transferred (body %.0f gzipped, %.0f decoded), assets %.0f bytes transferred; %.0f DOM elements",
		what, perf["transfer"], perf["encoded"], perf["decoded"], perf["assets"], perf["elements"])
	return perf
}

// tokenSelector names every element of the page that holds one token (a
// mark-ahead tag holds a label and a time, and may wrap between them).
const tokenSelector = `time, code, .tok, .node, .rel, .dur, .tag:not(.mark-ahead), .res, .who, td.id a, tr[data-node] td.id, .zone, td.hint`

// checkTokens fails the test for every visible token that spans more
// than one line, by its geometry: an inline element broken over lines has
// a client rect per line, and the text it holds (a Range over its
// contents) lies on more than one line, whatever its display. It also
// fails when the page itself scrolls sideways (tables scroll in their own
// box). It must find at least least tokens.
func checkTokens(t *testing.T, b *browser, where string, least int) {
	t.Helper()
	js := `(() => {
		const lines = el => {
			const r = document.createRange();
			r.selectNodeContents(el);
			const rs = Array.from(r.getClientRects()).filter(x => x.width > 0 && x.height > 0).sort((a, b) => a.top - b.top);
			let n = 0, bottom = -Infinity;
			for (const x of rs) {
				if (x.top >= bottom - 1) { n++; bottom = x.bottom; } else { bottom = Math.max(bottom, x.bottom); }
			}
			return n;
		};
		const bad = [];
		let checked = 0;
		for (const el of document.querySelectorAll(` + strconv.Quote(tokenSelector) + `)) {
			const rects = el.getClientRects().length;
			if (rects === 0 || el.textContent.trim() === '') { continue; } // not shown
			checked++;
			const n = lines(el);
			if (rects !== 1 || n !== 1) {
				bad.push(el.tagName.toLowerCase() + '.' + el.className + ' ' + JSON.stringify(el.textContent) + ': ' + rects + ' rects, ' + n + ' lines');
			}
		}
		const width = document.documentElement.clientWidth, wide = [];
		for (const el of document.body.querySelectorAll('*')) {
			if (el.getBoundingClientRect().right > width + 1 && !el.closest('.scroll, section#runs, h2.id') && el.children.length === 0) {
				wide.push(el.tagName.toLowerCase() + '.' + el.className + ' ' + JSON.stringify(el.textContent.slice(0, 80)));
			}
		}
		return JSON.stringify({checked: checked, bad: bad.slice(0, 20), nbad: bad.length, wide: wide.slice(0, 10),
			scrollWidth: document.documentElement.scrollWidth, width: document.documentElement.clientWidth});
	})()`
	var res struct {
		Checked, NBad, ScrollWidth, Width int
		Bad, Wide                         []string
	}
	if err := json.Unmarshal([]byte(evalAs[string](b, js)), &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d tokens checked, %d broken", where, res.Checked, res.NBad)
	if res.Checked < least {
		t.Errorf("%s: only %d tokens found, want at least %d", where, res.Checked, least)
	}
	for _, s := range res.Bad {
		t.Errorf("%s: a token breaks: %s", where, s)
	}
	if res.ScrollWidth > res.Width {
		t.Errorf("%s: the page scrolls sideways: %d px wide in a %d px viewport; past its right edge: %q", where, res.ScrollWidth, res.Width, res.Wide)
	}
}
