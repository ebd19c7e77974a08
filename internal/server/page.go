package server

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/ops"
)

// The status page (DESIGN.md "Operating it", "Status page"): GET / lists
// every schedule and the live nodes, GET /schedules/{id} one schedule's
// last runs with a chart of their durations. Both are rendered here from
// the same ops.Service the API answers from, so the page and the API can
// never disagree. The page reads without JavaScript; page.js only adds the
// buttons (trigger, pause, resume, sent to the API with the token as a
// bearer header) and a refresh that swaps <main> in place.
//
// With ?part=main a page answers only its <main> content: that is what
// the refresh fetches.
//
// With [http] read_token the page asks for it by HTTP Basic (any user
// name, the token as the password): a browser prompts for it and resends
// it by itself, so the page stays readable without JavaScript, and the
// refresh's fetch carries it too. A bearer header is accepted as well.

//go:embed page
var pageFS embed.FS

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"rfc3339":  func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"dur":      fmtDuration,
	"resclass": resultClass,
	"schedurl": func(id string) string { return "/schedules/" + url.PathEscape(id) },
	"short":    shortHash,
	"long":     func(id string) bool { return len(id) > pageIDShown },
}).ParseFS(pageFS, "page/*.html"))

// pageRefresh is how often the page refreshes itself (page.js; a meta
// refresh inside <noscript> without JavaScript).
const pageRefresh = 5 * time.Second

// Page limits: the detail page's runs (and its chart's bars); the queued
// requests a row of the list shows (the schedule's page shows them all).
const (
	pageRunsDefault = 50
	pageRunsMax     = 500
	pageQueueShown  = 3
)

// pageIDShown is the longest id the list surely shows whole: page.css
// cuts the link at 32ch (32 widths of a "0", more of most letters) with
// an ellipsis, so a longer id gets its whole self as the link's title.
const pageIDShown = 32

// pageOffsetWarn is the clock offset the nodes table marks: the
// BextClockOffset alert's threshold (deploy/alerts.yml), half the default
// max_clock_skew.
const pageOffsetWarn = 0.5 // seconds

// pageCSP forbids every source but this origin's stylesheet, images and
// API, and every script but the one carrying the response's nonce: an
// id, error line or output tail that slips past escaping cannot run.
const pageCSP = "default-src 'none'; script-src 'nonce-%s'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func (a *api) servePage(mux *http.ServeMux) {
	assets, err := fs.Sub(pageFS, "page")
	if err != nil {
		panic(err) // the embedded directory is part of the build
	}
	static := http.FileServerFS(assets)
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".html") {
			http.NotFound(w, r) // the templates are not assets
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		static.ServeHTTP(w, r)
	})))
	mux.HandleFunc("GET /{$}", a.pageReader(a.statusPage))
	mux.HandleFunc("GET /schedules/{id}", a.pageReader(a.schedulePage))
}

// pageReader guards a page like reader guards the API, but asks for the
// token by HTTP Basic so a browser prompts for it.
func (a *api) pageReader(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.hasRead {
			got, ok := pageToken(r)
			okRead, okWrite := matches(got, a.read), a.hasWrite && matches(got, a.write)
			if !ok || (!okRead && !okWrite) {
				w.Header().Set("WWW-Authenticate", `Basic realm="bext-scheduler", charset="UTF-8"`)
				securityHeaders(w, "")
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte("this page needs [http] read_token: give it as the password (any user name)\n"))
				return
			}
		}
		h(w, r)
	}
}

// pageToken is the digest of the token a page request carries: the
// password of HTTP Basic, or a bearer token.
func pageToken(r *http.Request) ([32]byte, bool) {
	if _, pass, ok := r.BasicAuth(); ok {
		return digest(pass), true
	}
	return bearer(r)
}

// securityHeaders are every page answer's: the CSP (with nonce; none for
// an answer without script), no caching, no framing, no referrer.
func securityHeaders(w http.ResponseWriter, nonce string) {
	h := w.Header()
	if nonce == "" {
		h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	} else {
		h.Set("Content-Security-Policy", strings.Replace(pageCSP, "%s", nonce, 1))
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func newNonce() string {
	var b [18]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// pageCommon is what every page's frame shows.
type pageCommon struct {
	Title   string
	Nonce   string
	Now     time.Time
	Refresh int  // seconds
	Writes  bool // a write token is configured: show the buttons
	Error   string
	Main    string // the template that renders <main>'s content
}

// statusData is GET /.
type statusData struct {
	pageCommon
	Schedules []scheduleRow
	Nodes     []nodeRow
	Drift     cluster.ConfigDrift
	Paused    int
	Failing   int
	MarkAhead int // schedules whose tick mark lies ahead of the clock
	NoNode    int // targeted schedules no live node's tags match
	// Lost counts the schedules with a lost tick in the last day, from
	// ops.LostRecently: a summary of every schedule's history, which the
	// Service caches (15 s, longer when slow to compute) rather than
	// reading every history on every load of a page that refreshes every
	// few seconds.
	Lost int
	// Running and Queued count the schedules running now and those with
	// manual work waiting.
	Running, Queued int
}

// scheduleRow is a schedule as both pages show it. Each of ops.Schedule's
// fields is rendered by one named template of page.html, shared by the
// list's row and the schedule's page: "pause-state" (the state cell),
// "last-run" (the last run cell), "now" and "queue-head" (what runs and
// waits now).
type scheduleRow struct {
	ops.Schedule
	NextIn  string // "in 4m 10s"
	LastAgo string // "3m ago"
	// ActedAgo is since the newest operator act (LastAction).
	ActedAgo string
	Drifted  bool
	Lost     int // ticks lost in the last day (list page only)

	Live      []liveRun   // Running, with how long each has run
	Queue     []queuedReq // Queued, with how long each has waited
	QueueHead []queuedReq // the first pageQueueShown of Queue: the list's
	QueueMore int         // how many of Queue the list leaves to the schedule's page
}

// liveRun is a run going on now: "running on node-b for 12s".
type liveRun struct {
	ops.Running
	For string
}

// queuedReq is a trigger or backfill waiting for a node.
type queuedReq struct {
	ops.Queued
	Ago string // since it was queued
}

type nodeRow struct {
	ops.Node
	Uptime  string
	SeenAgo string
	// Offset is the node's clock offset as the page shows it ("+12ms",
	// "-1.5s"), "" when the node has not measured one; OffsetWarn when
	// it is past pageOffsetWarn either way.
	Offset     string
	OffsetWarn bool
}

// scheduleData is GET /schedules/{id}.
type scheduleData struct {
	pageCommon
	Schedule scheduleRow
	Runs     []runRow
	Chart    chart
	Limit    int
	Ticks    []tickCell // the last ops.AuditDefaultTicks ticks, oldest first
	TicksErr string     // why the ticks are not shown
}

// tickCell is one tick of the detail page's strip.
type tickCell struct {
	Fate  string // the cell's class
	Title string // tick, fate, reason, node
}

func tickCells(rows []ops.AuditTick) []tickCell {
	cells := make([]tickCell, len(rows))
	for i, r := range rows {
		title := r.Tick.UTC().Format(time.RFC3339) + " " + r.Fate
		if r.Reason != nil {
			title += " (" + *r.Reason + ")"
		}
		if r.Node != nil {
			title += " on " + *r.Node
		}
		if r.Result != nil {
			title += ": " + *r.Result
		}
		if r.Manual != nil && *r.Manual {
			title += ", manual"
		}
		if r.Note != nil {
			title += ": " + *r.Note
		}
		cells[i] = tickCell{Fate: r.Fate, Title: title}
	}
	return cells
}

type runRow struct {
	ops.Run
	Ago string
}

func (a *api) statusPage(w http.ResponseWriter, r *http.Request) {
	d := statusData{pageCommon: a.common(r, "bext-scheduler", "status-main")}
	st, err := a.ops.Status(r.Context())
	if err != nil {
		d.Error = a.pageError(r, err)
	} else {
		d.Drift, d.Schedules, d.Nodes = st.ConfigDrift, scheduleRows(st, d.Now), nodeRows(st.Nodes, d.Now)
		for _, s := range st.Schedules {
			if s.Paused {
				d.Paused++
			}
			if s.LastRun != nil && resultClass(s.LastRun.Result) == "bad" {
				d.Failing++
			}
			if s.MarkAhead != nil {
				d.MarkAhead++
			}
			if s.NoNode {
				d.NoNode++
			}
			if len(s.Running) > 0 {
				d.Running++
			}
			if len(s.Queued) > 0 {
				d.Queued++
			}
		}
		lost, _, lerr := a.ops.LostRecently(r.Context())
		switch {
		case lerr == nil:
			for i := range d.Schedules {
				if n := lost[d.Schedules[i].ID]; n > 0 {
					d.Schedules[i].Lost = n
					d.Lost++
				}
			}
		case !errors.Is(lerr, ops.ErrNoBackend):
			// The rest of the page stands: lost ticks are only unmarked.
			a.logger.Warn("page: auditing the last day's ticks failed", "err", lerr)
		}
	}
	a.render(w, r, d.Nonce, d, err)
}

func scheduleRows(st ops.Status, now time.Time) []scheduleRow {
	drifted := make(map[string]bool, len(st.ConfigDrift.Schedules))
	for _, sd := range st.ConfigDrift.Schedules {
		drifted[sd.ID] = true
	}
	rows := make([]scheduleRow, len(st.Schedules))
	for i, s := range st.Schedules {
		rows[i] = scheduleRow{Schedule: s, Drifted: drifted[s.ID]}
		if s.NextTick != nil {
			rows[i].NextIn = relative(now, *s.NextTick)
		}
		if s.LastRun != nil {
			rows[i].LastAgo = relative(now, s.LastRun.StartedAt)
		}
		if s.LastAction != nil {
			rows[i].ActedAgo = relative(now, s.LastAction.At)
		}
		rows[i].Live, rows[i].Queue = liveRuns(s.Running, now), queuedReqs(s.Queued, now)
		rows[i].QueueHead = rows[i].Queue[:min(len(rows[i].Queue), pageQueueShown)]
		rows[i].QueueMore = len(rows[i].Queue) - len(rows[i].QueueHead)
	}
	return rows
}

func liveRuns(rs []ops.Running, now time.Time) []liveRun {
	out := make([]liveRun, len(rs))
	for i, r := range rs {
		out[i] = liveRun{Running: r, For: fmtDuration(now.Sub(r.StartedAt))}
	}
	return out
}

func queuedReqs(qs []ops.Queued, now time.Time) []queuedReq {
	out := make([]queuedReq, len(qs))
	for i, q := range qs {
		out[i] = queuedReq{Queued: q, Ago: relative(now, q.QueuedAt)}
	}
	return out
}

func nodeRows(ns []ops.Node, now time.Time) []nodeRow {
	rows := make([]nodeRow, len(ns))
	for i, n := range ns {
		rows[i] = nodeRow{Node: n, Uptime: fmtDuration(now.Sub(n.StartedAt)), SeenAgo: relative(now, n.LastSeen)}
		if off := n.ClockOffsetSeconds; off != nil {
			rows[i].Offset = fmtOffset(*off)
			rows[i].OffsetWarn = math.Abs(*off) > pageOffsetWarn
		}
	}
	return rows
}

// fmtOffset is a clock offset with its sign, to the millisecond: "+12ms",
// "-1.5s", and "0ms" under half a millisecond either way (not "-0ms").
func fmtOffset(sec float64) string {
	d := time.Duration(math.Round(sec*1000)) * time.Millisecond
	switch {
	case d < 0:
		return "-" + fmtDuration(-d)
	case d > 0:
		return "+" + fmtDuration(d)
	default:
		return fmtDuration(0)
	}
}

func (a *api) schedulePage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	d := scheduleData{pageCommon: a.common(r, id+" · bext-scheduler", "schedule-main"), Limit: pageRunsDefault}
	if v := r.URL.Query().Get("limit"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 {
			d.Limit = min(n, pageRunsMax)
		}
	}
	if !a.ops.Known(id) {
		securityHeaders(w, "")
		http.Error(w, "no schedule "+strconv.Quote(id)+" in this node's config", http.StatusNotFound)
		return
	}
	// The status of one schedule comes from the same assembly as the
	// list's, so the two pages agree.
	st, err := a.ops.Status(r.Context())
	if err == nil {
		rows := scheduleRows(st, d.Now)
		for _, row := range rows {
			if row.ID == id {
				d.Schedule = row
			}
		}
		var runs []ops.Run
		runs, err = a.ops.Runs(r.Context(), id, d.Limit)
		if errors.Is(err, ops.ErrNoBackend) {
			err = nil // no history without a backend: say so below, not as a failure
			d.Error = "no lock backend is configured, so no run history is kept"
		}
		for _, run := range runs {
			d.Runs = append(d.Runs, runRow{Run: run, Ago: relative(d.Now, run.StartedAt)})
		}
		d.Chart = durationChart(runs, d.Schedule.ExpectedRuntime, d.Schedule.MinRuntime)
		if err == nil {
			ticks, aerr := a.ops.Audit(r.Context(), id, time.Time{}, time.Time{})
			switch {
			case aerr == nil:
				d.Ticks = tickCells(ticks)
			case errors.Is(aerr, ops.ErrNoBackend):
			default:
				// The rest of the page stands without the strip.
				a.logger.Warn("page: auditing the schedule's ticks failed", "schedule", id, "err", aerr)
				d.TicksErr = "the audit of its ticks failed; see the node's log"
			}
		}
	}
	if err != nil {
		d.Schedule.ID = id
		d.Error = a.pageError(r, err)
	}
	a.render(w, r, d.Nonce, d, err)
}

func (a *api) common(r *http.Request, title, main string) pageCommon {
	return pageCommon{Title: title, Nonce: newNonce(), Now: a.ops.Now(),
		Refresh: int(pageRefresh / time.Second), Writes: a.hasWrite, Main: main}
}

// pageError is the banner for an ops failure: our own words for a backend
// that failed (its message may name hosts), logged in full.
func (a *api) pageError(r *http.Request, err error) string {
	switch {
	case ops.Unreachable(err):
		a.logger.Warn("page: backend unavailable", "path", r.URL.Path, "err", err)
		return "the lock backend did not answer; see the node's log"
	case errors.Is(err, ops.ErrUnknownSchedule), errors.Is(err, ops.ErrInvalid):
		return err.Error()
	default:
		a.logger.Error("page: failed", "path", r.URL.Path, "err", err)
		return "reading the cluster state failed; see the node's log"
	}
}

// render writes the page, or only its <main> content for ?part=main, into
// a buffer first so a template failure is a 500, not half a page.
func (a *api) render(w http.ResponseWriter, r *http.Request, nonce string, data any, opsErr error) {
	name := "page"
	if r.URL.Query().Get("part") == "main" {
		name = "main"
	}
	var buf bytes.Buffer
	if err := pageTmpl.ExecuteTemplate(&buf, name, data); err != nil {
		a.logger.Error("page: rendering", "path", r.URL.Path, "err", err)
		securityHeaders(w, "")
		http.Error(w, "rendering the page failed; see the node's log", http.StatusInternalServerError)
		return
	}
	securityHeaders(w, nonce)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Vary", "Accept-Encoding")
	status := http.StatusOK
	if opsErr != nil {
		status = http.StatusServiceUnavailable
	}
	// At 1,000 schedules the page is near 900 KB, refreshed every few
	// seconds: gzip makes it a tenth of that for a few milliseconds.
	if buf.Len() >= gzipMin && acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(status)
		zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // a valid level: no error
		_, _ = zw.Write(buf.Bytes())                    // the client went away: nothing to do
		_ = zw.Close()
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // the client went away: nothing to do
}

// gzipMin is the smallest page worth compressing.
const gzipMin = 8 << 10

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// resultClass is a run result's colour: good, bad or neutral (cancelled
// by a shutdown is not the job's failure).
func resultClass(result string) string {
	switch result {
	case "success":
		return "good"
	case "failure", "timeout", "lock_lost":
		return "bad"
	default:
		return "neutral"
	}
}

// relative says when t is from now: "in 4m 10s", "3h 2m ago", "now".
func relative(now, t time.Time) string {
	d := t.Sub(now)
	switch {
	case d > -time.Second && d < time.Second:
		return "now"
	case d > 0:
		return "in " + fmtDuration(d)
	default:
		return fmtDuration(-d) + " ago"
	}
}

// fmtDuration is a duration in at most two units, for people.
func fmtDuration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return two(int(d/time.Minute), "m", int(d%time.Minute/time.Second), "s")
	case d < 48*time.Hour:
		return two(int(d/time.Hour), "h", int(d%time.Hour/time.Minute), "m")
	default:
		return two(int(d/(24*time.Hour)), "d", int(d%(24*time.Hour)/time.Hour), "h")
	}
}

func two(a int, ua string, b int, ub string) string {
	s := strconv.Itoa(a) + ua
	if b != 0 {
		s += " " + strconv.Itoa(b) + ub
	}
	return s
}

// shortHash is a config hash as the page shows it: enough to tell two
// apart at a glance.
func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
