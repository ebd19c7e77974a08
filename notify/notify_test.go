package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/jobs"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// hit is one request a receiver got.
type hit struct {
	Method, Path, RID, Body string
	At                      time.Time
}

// receiver is a local HTTP server standing in for healthchecks.io or a
// webhook: it records every request and hands it to the test on a channel.
type receiver struct {
	*httptest.Server
	hits chan hit
	mu   sync.Mutex
	all  []hit
}

// newReceiver starts a receiver; answer decides each response (nil: 200).
func newReceiver(t *testing.T, answer func(w http.ResponseWriter, h hit)) *receiver {
	t.Helper()
	rc := &receiver{hits: make(chan hit, 1024)}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h := hit{Method: r.Method, Path: r.URL.Path, RID: r.URL.Query().Get("rid"), Body: string(b), At: time.Now()}
		rc.mu.Lock()
		rc.all = append(rc.all, h)
		rc.mu.Unlock()
		select {
		case rc.hits <- h:
		default:
		}
		if answer != nil {
			answer(w, h)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

// next waits for the receiver's next request.
func (rc *receiver) next(t *testing.T) hit {
	t.Helper()
	select {
	case h := <-rc.hits:
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the receiver within 10s")
		return hit{}
	}
}

// start runs n until the test ends, waiting for it to stop.
func start(t *testing.T, n *Notifier) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// logBuf is a concurrency-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func testLogger(buf *logBuf) *slog.Logger { return slog.New(slog.NewTextHandler(buf, nil)) }

const (
	runA  = "0123456789abcdef0123456789abcdef"
	ridA  = "01234567-89ab-cdef-0123-456789abcdef"
	token = "s3cr3t-ping-token"
)

var tick = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

func record(id, runID string, res scheduler.RunResult, err error, start time.Time) scheduler.RunRecord {
	return scheduler.RunRecord{Schedule: id, Tick: start, Node: "node-a", Result: res, Start: start,
		Duration: time.Second, Attempts: 1, Err: err, RunID: runID}
}

// The healthchecks.io protocol: /start, then the bare URL, /fail or
// /<exit status>, each with the run id as a UUID rid; nothing for a run
// cancelled by shutdown.
func TestPingProtocol(t *testing.T) {
	rc := newReceiver(t, nil)
	base := rc.URL + "/ping/" + token
	n := New(Options{NodeID: "node-a", Pings: map[string]string{"job": base}})
	start(t, n)

	exit3 := &jobs.ExitError{Name: "backup", Code: 3}
	killed := &jobs.ExitError{Name: "backup", Code: -1}
	for _, tc := range []struct {
		name string
		res  scheduler.RunResult
		err  error
		want string // path after base; "-" for no result ping
	}{
		{"success", scheduler.ResultSuccess, nil, ""},
		{"exit status", scheduler.ResultFailure, exit3, "/3"},
		{"wrapped exit status", scheduler.ResultFailure, errors.Join(errors.New("ctx"), exit3), "/3"},
		{"killed by a signal", scheduler.ResultFailure, killed, "/fail"},
		{"http job failure", scheduler.ResultFailure, errors.New("jobs: status 502"), "/fail"},
		{"timeout", scheduler.ResultTimeout, killed, "/fail"},
		{"lock lost", scheduler.ResultLockLost, errors.New("lock lost"), "/fail"},
		{"cancelled", scheduler.ResultCancelled, errors.New("shutdown"), "-"},
		{"not run", scheduler.ResultNotRun, errors.New("granted too late to run"), "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.RunStarted(scheduler.RunStart{Schedule: "job", Tick: tick, Node: "node-a", RunID: runA, Start: tick})
			n.RunRecorded(record("job", runA, tc.res, tc.err, tick))
			h := rc.next(t)
			if h.Path != "/ping/"+token+"/start" || h.RID != ridA || h.Method != http.MethodPost {
				t.Errorf("first ping %s %s rid=%s, want POST .../start rid=%s", h.Method, h.Path, h.RID, ridA)
			}
			if tc.want == "-" {
				// The next ping of the next subtest must be a start: no result.
				return
			}
			h = rc.next(t)
			if h.Path != "/ping/"+token+tc.want || h.RID != ridA {
				t.Errorf("result ping %s rid=%s, want %s rid=%s", h.Path, h.RID, "/ping/"+token+tc.want, ridA)
			}
			if tc.err != nil && !strings.Contains(h.Body, strings.SplitN(tc.err.Error(), "\n", 2)[0]) {
				t.Errorf("result ping body %q, want the error line", h.Body)
			}
		})
	}
	// Schedules without a ping_url are not pinged; the receiver saw only
	// the pings above.
	n.RunStarted(scheduler.RunStart{Schedule: "other", RunID: runA})
	n.RunRecorded(record("other", runA, scheduler.ResultFailure, nil, tick))
	n.RunStarted(scheduler.RunStart{Schedule: "job", RunID: runA})
	if h := rc.next(t); h.Path != "/ping/"+token+"/start" {
		t.Errorf("got %s, want only job's start (other has no ping_url)", h.Path)
	}
}

func TestPingURL(t *testing.T) {
	for _, tc := range []struct{ raw, suffix, id, want string }{
		{"https://hc-ping.com/u-u-i-d", "start", runA, "https://hc-ping.com/u-u-i-d/start?rid=" + ridA},
		{"https://hc-ping.com/u-u-i-d/", "", runA, "https://hc-ping.com/u-u-i-d/?rid=" + ridA},
		{"https://hc-ping.com/KEY/backup?create=1", "fail", runA, "https://hc-ping.com/KEY/backup/fail?create=1&rid=" + ridA},
		{"https://hc-ping.com/u", "7", ridA, "https://hc-ping.com/u/7?rid=" + ridA},
		{"https://hc-ping.com/u", "", "not-a-uuid", "https://hc-ping.com/u"},
	} {
		if got := pingURL(tc.raw, tc.suffix, tc.id); got != tc.want {
			t.Errorf("pingURL(%q, %q, %q) = %q, want %q", tc.raw, tc.suffix, tc.id, got, tc.want)
		}
	}
}

// A monitor that hangs, or answers 500, never delays the run: every
// observer call returns at once, a full queue drops (counted and logged),
// and the secret of the URL never reaches the log.
func TestSlowMonitorsNeverDelay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(release <-chan struct{}) func(http.ResponseWriter, hit)
	}{
		{"hangs", func(release <-chan struct{}) func(http.ResponseWriter, hit) {
			return func(http.ResponseWriter, hit) { <-release }
		}},
		{"answers 500", func(<-chan struct{}) func(http.ResponseWriter, hit) {
			return func(w http.ResponseWriter, _ hit) { w.WriteHeader(http.StatusInternalServerError) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			rc := newReceiver(t, tc.answer(release))
			t.Cleanup(func() { close(release) }) // runs before rc.Close
			var logs logBuf
			url := rc.URL + "/" + token
			n := New(Options{NodeID: "node-a", URL: url + "/hook", Pings: map[string]string{"job": url},
				Timeout: time.Second, Backoff: 10 * time.Millisecond, Queue: 8, Workers: 2, Logger: testLogger(&logs)})
			start(t, n)

			const runs = 200
			var slowest time.Duration
			for i := range runs {
				id := strings.Repeat("0", 29) + string(rune('a'+i%6)) + "00"
				t0 := time.Now()
				n.RunStarted(scheduler.RunStart{Schedule: "job", RunID: id})
				n.RunRecorded(record("job", id, scheduler.ResultFailure, &jobs.ExitError{Name: "x", Code: 1}, tick.Add(time.Duration(i)*time.Second)))
				slowest = max(slowest, time.Since(t0))
			}
			t.Logf("slowest RunStarted+RunRecorded of %d: %v; dropped %d", runs, slowest, n.Dropped())
			// A call that waited for the monitor would take the 1s timeout;
			// the margin below it is for a loaded machine under -race.
			if slowest > 250*time.Millisecond {
				t.Errorf("an observer call took %v: the tick's path waited for the monitor", slowest)
			}
			if n.Dropped() == 0 {
				t.Error("nothing dropped: the queue is not bounded")
			}
			rc.next(t) // something was delivered (and, for 500, retried)
			waitFor(t, func() bool { return strings.Contains(logs.String(), "failed") })
			if !strings.Contains(logs.String(), "notification dropped") {
				t.Errorf("no drop logged; log:\n%s", logs.String())
			}
			if strings.Contains(logs.String(), token) {
				t.Errorf("the URL's secret reached the log:\n%s", logs.String())
			}
		})
	}
}

// A 500 is retried Retries times with backoff, then given up and logged
// without the secret; a 404 is not retried.
func TestRetries(t *testing.T) {
	status := http.StatusInternalServerError
	var mu sync.Mutex
	rc := newReceiver(t, func(w http.ResponseWriter, _ hit) { mu.Lock(); defer mu.Unlock(); w.WriteHeader(status) })
	var logs logBuf
	n := New(Options{Pings: map[string]string{"job": rc.URL + "/" + token}, Retries: 2, Backoff: 20 * time.Millisecond,
		Logger: testLogger(&logs)})
	start(t, n)
	n.RunRecorded(record("job", runA, scheduler.ResultSuccess, nil, tick))
	first := rc.next(t)
	second := rc.next(t)
	third := rc.next(t)
	if d := second.At.Sub(first.At); d < 20*time.Millisecond {
		t.Errorf("first retry after %v, want the 20ms backoff", d)
	}
	if d := third.At.Sub(second.At); d < 40*time.Millisecond {
		t.Errorf("second retry after %v, want the doubled 40ms backoff", d)
	}
	waitFor(t, func() bool { return strings.Contains(logs.String(), "ping failed") })
	if l := logs.String(); strings.Contains(l, token) || !strings.Contains(l, "status 500") {
		t.Errorf("log should say the status without the secret:\n%s", l)
	}
	select {
	case h := <-rc.hits:
		t.Errorf("a fourth attempt %v: want 1 + 2 retries", h)
	default:
	}

	mu.Lock()
	status = http.StatusNotFound
	mu.Unlock()
	n.RunRecorded(record("job", runA, scheduler.ResultSuccess, nil, tick))
	rc.next(t)
	n.RunRecorded(record("job", runA, scheduler.ResultFailure, nil, tick))
	if h := rc.next(t); !strings.HasSuffix(h.Path, "/fail") {
		t.Errorf("after a 404 the next request is %s, want the next run's /fail (no retry of a 404)", h.Path)
	}
}

// The secret of an unreachable URL never reaches the log either (the
// client's error quotes the whole URL).
func TestUnreachableURLRedacted(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	var logs logBuf
	n := New(Options{Pings: map[string]string{"job": "http://user:pw-" + token + "@" + addr + "/" + token + "?k=" + token},
		Retries: -1, Logger: testLogger(&logs)})
	start(t, n)
	n.RunRecorded(record("job", runA, scheduler.ResultSuccess, nil, tick))
	waitFor(t, func() bool { return strings.Contains(logs.String(), "ping failed") })
	if l := logs.String(); strings.Contains(l, token) || !strings.Contains(l, "http://"+addr) {
		t.Errorf("want the URL as http://%s and no secret; log:\n%s", addr, l)
	}
}

// A result ping never overtakes its start, even when the start is slow to
// answer and other workers are free.
func TestResultAfterStart(t *testing.T) {
	rc := newReceiver(t, func(w http.ResponseWriter, h hit) {
		if strings.HasSuffix(h.Path, "/start") {
			time.Sleep(150 * time.Millisecond) // a slow monitor, not a wait for the test
		}
	})
	n := New(Options{Pings: map[string]string{"job": rc.URL + "/u"}, Workers: 4})
	start(t, n)
	n.RunStarted(scheduler.RunStart{Schedule: "job", RunID: runA})
	n.RunRecorded(record("job", runA, scheduler.ResultSuccess, nil, tick))
	first, second := rc.next(t), rc.next(t)
	if first.Path != "/u/start" || second.Path != "/u" {
		t.Errorf("order %s, %s; want /u/start then /u", first.Path, second.Path)
	}
	if second.At.Sub(first.At) < 150*time.Millisecond {
		t.Errorf("the result was sent %v after the start was received, before the start was answered", second.At.Sub(first.At))
	}
}

// history is a run history held in memory: the cluster's, as the
// notifier reads it (newest first).
type history struct {
	mu   sync.Mutex
	runs []cluster.Run
}

func (h *history) add(r scheduler.RunRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs = append([]cluster.Run{{Schedule: r.Schedule, Node: r.Node, Result: string(r.Result), StartedAt: r.Start, RunID: r.RunID}}, h.runs...)
}

func (h *history) Runs(_ context.Context, id string, limit int) ([]cluster.Run, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []cluster.Run
	for _, r := range h.runs {
		if r.Schedule == id && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

// A streak of failures across three nodes gives one failure notification
// and one recovery, whichever node ran each run: each node decides on the
// cluster's history, not on its own runs.
func TestStreakAcrossNodes(t *testing.T) {
	rc := newReceiver(t, nil)
	h := &history{}
	var nodes []*Notifier
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		n := New(Options{NodeID: id, URL: rc.URL + "/hook/" + token, History: h,
			Mask: func(s string) string { return strings.ReplaceAll(s, "hunter2", "xxxxx") }})
		start(t, n)
		nodes = append(nodes, n)
	}
	results := []scheduler.RunResult{"success", "failure", "timeout", "failure", "cancelled", "failure", "lock_lost", "success", "success", "failure"}
	var events []Event
	for i, res := range results {
		n := nodes[i%3]
		r := record("job", strings.Repeat(string(rune('a'+i)), 32), res,
			errors.New("exit 1: password hunter2 at https://u:p@db.example/x\nsecond line"), tick.Add(time.Duration(i)*time.Minute))
		r.Node = n.opts.NodeID
		if res == scheduler.ResultSuccess {
			r.Err = nil
		}
		n.RunRecorded(r)
		// Wait for the decision before the next run, as the next tick's
		// run comes after this one's record is in history.
		want := map[int]string{1: EventFailure, 7: EventRecovery, 9: EventFailure}[i]
		if want != "" {
			got := rc.next(t)
			var ev Event
			if err := json.Unmarshal([]byte(got.Body), &ev); err != nil {
				t.Fatalf("body %q: %v", got.Body, err)
			}
			if ev.Event != want || ev.RunID != r.RunID || ev.Node != r.Node {
				t.Errorf("run %d: got %+v, want a %s for run %s on %s", i, ev, want, r.RunID, r.Node)
			}
			events = append(events, ev)
		} else {
			waitDrained(t, n)
		}
		h.add(r)
	}
	select {
	case extra := <-rc.hits:
		t.Errorf("an extra notification: %s", extra.Body)
	default:
	}
	if len(events) != 3 {
		t.Fatalf("%d notifications, want 3", len(events))
	}
	f := events[0]
	if f.Schedule != "job" || f.Result != "failure" || f.Attempts != 1 || f.Tick != tick.Add(time.Minute).Format(time.RFC3339Nano) ||
		f.Error != "exit 1: password xxxxx at https://db.example" || !strings.Contains(f.Text, "job failure on node-b") {
		t.Errorf("failure event %+v", f)
	}
}

// Without a history (no backend keeps one) a streak is this node's runs.
func TestStreakOnThisNode(t *testing.T) {
	rc := newReceiver(t, nil)
	n := New(Options{NodeID: "n", URL: rc.URL})
	start(t, n)
	for i, res := range []scheduler.RunResult{"failure", "failure", "success", "success"} {
		n.RunRecorded(record("job", runA, res, nil, tick.Add(time.Duration(i)*time.Second)))
	}
	for _, want := range []string{EventFailure, EventRecovery} {
		var ev Event
		if err := json.Unmarshal([]byte(rc.next(t).Body), &ev); err != nil || ev.Event != want {
			t.Errorf("got %+v (%v), want %s", ev, err, want)
		}
	}
	waitDrained(t, n)
	if len(rc.hits) != 0 {
		t.Errorf("%d extra notifications", len(rc.hits))
	}
}

func TestPaused(t *testing.T) {
	rc := newReceiver(t, nil)
	n := New(Options{NodeID: "node-a", URL: rc.URL})
	start(t, n)
	n.Paused("job", "paused after 3 failed runs in a row (pause_after_failures)")
	var ev Event
	if err := json.Unmarshal([]byte(rc.next(t).Body), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Event != EventPaused || ev.Schedule != "job" || ev.Node != "node-a" || !strings.Contains(ev.Note, "3 failed runs") ||
		!strings.Contains(ev.Text, "paused cluster-wide") {
		t.Errorf("got %+v", ev)
	}
}

// What is queued when the node shuts down is still delivered (serve
// stops the notifier after the scheduler, so every run's record is in).
func TestShutdownDelivers(t *testing.T) {
	rc := newReceiver(t, func(http.ResponseWriter, hit) { time.Sleep(20 * time.Millisecond) }) // a slow monitor
	n := New(Options{Pings: map[string]string{"job": rc.URL + "/u"}, Workers: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	for range 5 {
		n.RunRecorded(record("job", runA, scheduler.ResultSuccess, nil, tick))
	}
	cancel()
	<-done
	if len(rc.hits) != 5 {
		t.Errorf("%d of 5 queued pings delivered at shutdown", len(rc.hits))
	}
}

// waitDrained waits until n's webhook queue is empty and its worker idle:
// a decision that sends nothing leaves no other trace.
func waitDrained(t *testing.T, n *Notifier) {
	t.Helper()
	waitDrainedTo(t, n, n.opts.URL)
}

// waitDrainedTo is waitDrained for the webhook lane of url's host.
func waitDrainedTo(t *testing.T, n *Notifier, url string) {
	t.Helper()
	done := make(chan struct{})
	n.enqueue(&message{kind: kindDone, done: done, raw: url})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the webhook worker did not get through its queue")
	}
}

// waitFor polls cond: for log lines, which nothing signals.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// [notify] events chooses what is posted: here the anomalies, missed and
// lost but not the streaks nor the pauses; a schedule's notify_url takes
// its events instead of the global URL.
func TestEventsChosen(t *testing.T) {
	t.Parallel()
	global := newReceiver(t, nil)
	own := newReceiver(t, nil)
	n := New(Options{NodeID: "node-a", URL: global.URL + "/hook",
		Events: []string{EventOverrun, EventTooFast, EventMissed, EventLost},
		Schedules: map[string]Schedule{
			"slow":  {ExpectedRuntime: time.Second},
			"quick": {NotifyURL: own.URL + "/own", MinRuntime: 2 * time.Second},
		}})
	start(t, n)
	if !n.Sends(EventLost) || n.Sends(EventFailure) {
		t.Fatal("Sends disagrees with Events")
	}

	// Not chosen: a failure streak, its recovery, a pause.
	n.RunRecorded(record("slow", runA, scheduler.ResultFailure, errors.New("exit 1"), tick))
	n.RunRecorded(record("slow", runA, scheduler.ResultSuccess, nil, tick.Add(time.Second)))
	n.Paused("slow", "paused after 3 failed runs in a row")
	// A run over its expected_runtime.
	over := record("slow", runA, scheduler.ResultSuccess, nil, tick.Add(2*time.Second))
	over.Duration, over.Overrun = 1500*time.Millisecond, true
	n.RunRecorded(over)
	// A success under min_runtime (record's runs take 1s), to quick's own URL;
	// a failure as fast is no anomaly.
	n.RunRecorded(record("quick", runA, scheduler.ResultSuccess, nil, tick))
	n.RunRecorded(record("quick", runA, scheduler.ResultFailure, nil, tick.Add(time.Second)))
	// Skips: only missed is an event.
	n.TickSkipped("slow", tick.Add(3*time.Second), scheduler.SkipContended)
	n.TickSkipped("slow", tick.Add(4*time.Second), scheduler.SkipMissed)
	n.Lost("quick", tick.Add(5*time.Second))

	decode := func(h hit) Event {
		t.Helper()
		var ev Event
		if err := json.Unmarshal([]byte(h.Body), &ev); err != nil {
			t.Fatalf("body %q: %v", h.Body, err)
		}
		return ev
	}
	for _, want := range []struct{ event, tick, text string }{
		{EventOverrun, "2026-11-30T03:00:02Z", "slow overran: success on node-a took 1.5s, over its expected_runtime 1s"},
		{EventMissed, "2026-11-30T03:00:04Z", "slow missed tick 2026-11-30T03:00:04Z"},
	} {
		h := global.next(t)
		ev := decode(h)
		if h.Path != "/hook" || ev.Event != want.event || ev.Schedule != "slow" || ev.Tick != want.tick || ev.Node != "node-a" ||
			!strings.Contains(ev.Text, want.text) {
			t.Errorf("global webhook got %s %+v, want %s of slow at %s saying %q", h.Path, ev, want.event, want.tick, want.text)
		}
	}
	for _, want := range []struct{ event, tick, text string }{
		{EventTooFast, "2026-11-30T03:00:00Z", "quick too fast: success on node-a in 1s, under its min_runtime 2s"},
		{EventLost, "2026-11-30T03:00:05Z", "quick lost tick 2026-11-30T03:00:05Z"},
	} {
		h := own.next(t)
		ev := decode(h)
		if h.Path != "/own" || ev.Event != want.event || ev.Schedule != "quick" || ev.Tick != want.tick ||
			!strings.Contains(ev.Text, want.text) {
			t.Errorf("quick's notify_url got %s %+v, want %s at %s saying %q", h.Path, ev, want.event, want.tick, want.text)
		}
		if ev.Event == EventTooFast && (ev.DurationSeconds != 1 || ev.LimitSeconds != 2) {
			t.Errorf("too_fast says %vs under %vs, want 1s under 2s", ev.DurationSeconds, ev.LimitSeconds)
		}
	}
	waitDrained(t, n)
	waitDrainedTo(t, n, own.URL+"/own")
	if len(global.hits) != 0 || len(own.hits) != 0 {
		t.Errorf("%d + %d extra notifications: the events not chosen were sent", len(global.hits), len(own.hits))
	}
}

// The default events are the streaks and the pauses, as before events
// could be chosen; a schedule's notify_url gets them without a global URL.
func TestDefaultEventsAndOwnURL(t *testing.T) {
	t.Parallel()
	own := newReceiver(t, nil)
	n := New(Options{NodeID: "node-a", Schedules: map[string]Schedule{"job": {NotifyURL: own.URL + "/own"}}})
	start(t, n)
	over := record("job", runA, scheduler.ResultFailure, nil, tick)
	over.Overrun = true
	n.RunRecorded(over)
	n.TickSkipped("job", tick, scheduler.SkipMissed)
	n.Lost("job", tick)
	n.Paused("job", "paused")
	n.RunRecorded(record("other", runA, scheduler.ResultFailure, nil, tick)) // no URL at all
	for _, want := range []string{EventFailure, EventPaused} {
		var ev Event
		if err := json.Unmarshal([]byte(own.next(t).Body), &ev); err != nil || ev.Event != want {
			t.Errorf("got %+v (%v), want %s", ev, err, want)
		}
	}
	waitDrainedTo(t, n, own.URL+"/own")
	if len(own.hits) != 0 {
		t.Errorf("%d extra notifications: overrun, missed or lost sent by default", len(own.hits))
	}
}
