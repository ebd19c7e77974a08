package notify

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bext-dev/bext-scheduler/metrics"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// One hung monitor silences no other. Three schedules on one node ping
// three hosts; one never answers. Every tick, the two healthy monitors get
// both pings of their schedule (start, then success); the hung one's
// pings wait in its own bounded queue and, once it is full, are dropped,
// counted in bext_notify_dropped_total{kind="ping"} and logged once for
// the streak; when it answers again, that is logged once too.
func TestHungMonitorSilencesNoOther(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hung := newReceiver(t, func(http.ResponseWriter, hit) { <-release })
	healthy := map[string]*receiver{"a": newReceiver(t, nil), "b": newReceiver(t, nil)}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{})
	var logs logBuf
	const queue, workers = 4, 2
	n := New(Options{NodeID: "node-a", Logger: testLogger(&logs), OnDrop: m.NotifyDropped,
		Pings: map[string]string{"a": healthy["a"].URL + "/a", "hung": hung.URL + "/" + token, "b": healthy["b"].URL + "/b"},
		// Longer than the test: the hung monitor never answers in time.
		Timeout: time.Minute, Queue: queue, Workers: workers})
	start(t, n)
	var once sync.Once
	unhang := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unhang) // before the notifier stops and the receivers close

	runID := func(tick int, id string) string { return fmt.Sprintf("%030x%02x", tick, id[0]) }
	fire := func(tick int) {
		for _, id := range []string{"a", "hung", "b"} {
			at := tick0.Add(time.Duration(tick) * time.Second)
			n.RunStarted(scheduler.RunStart{Schedule: id, Tick: at, Node: "node-a", RunID: runID(tick, id), Start: at})
			n.RunRecorded(record(id, runID(tick, id), scheduler.ResultSuccess, nil, at))
		}
	}
	const ticks = 10
	for tick := range ticks {
		fire(tick)
		for id, rc := range healthy {
			rid := runUUID(runID(tick, id))
			for _, want := range []string{"/" + id + "/start", "/" + id} {
				select {
				case h := <-rc.hits:
					if h.Path != want || h.RID != rid {
						t.Fatalf("tick %d: %s got %s rid=%s, want %s rid=%s", tick, id, h.Path, h.RID, want, rid)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("tick %d: schedule %s's monitor got no %s within 10s: the hung monitor held it up", tick, id, want)
				}
			}
		}
	}

	// Nothing of the hung monitor's pings completes, so at most workers
	// are in flight and queue wait: the rest were dropped.
	dropped := dropCount(t, reg, "ping")
	if least := float64(2*ticks - workers - queue); dropped < least || dropped != float64(n.Dropped()) {
		t.Errorf("bext_notify_dropped_total{kind=\"ping\"} = %v (Dropped %d), want at least %v", dropped, n.Dropped(), least)
	}
	if v := dropCount(t, reg, "notification"); v != 0 {
		t.Errorf("bext_notify_dropped_total{kind=\"notification\"} = %v, want 0", v)
	}
	hungHost := strings.TrimPrefix(hung.URL, "http://")
	if l := logs.String(); strings.Count(l, "notification dropped") != 1 || !strings.Contains(l, hungHost) || strings.Contains(l, token) {
		t.Errorf("want one drop warning for the streak, naming %s without the secret; log:\n%s", hungHost, l)
	}

	// The monitor answers again: what it had in flight and queued goes out,
	// and so does the next tick's ping; that is logged once.
	unhang()
	for range 2*ticks - int(n.Dropped()) { // every ping it accepted
		hung.next(t)
	}
	fire(ticks)
	for rid := runUUID(runID(ticks, "hung")); ; {
		if h := hung.next(t); h.RID == rid && !strings.HasSuffix(h.Path, "/start") {
			break
		}
	}
	waitFor(t, func() bool { return strings.Contains(logs.String(), "delivered again") })
	if l := logs.String(); strings.Count(l, "delivered again") != 1 || strings.Count(l, "notification dropped") != 1 {
		t.Errorf("want one drop warning and one recovery line for the streak; log:\n%s", l)
	}
}

// tick0 is the first tick of the isolation tests.
var tick0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// dropCount reads bext_notify_dropped_total{kind} from reg.
func dropCount(t *testing.T, reg prometheus.Gatherer, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "bext_notify_dropped_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "kind" && lp.GetValue() == kind {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no bext_notify_dropped_total{kind=%q}", kind)
	return 0
}

// Destinations beyond the bound take turns: with one slot, three hosts all
// get their pings; and a destination whose queue is empty has no worker
// left (nor an entry) while the notifier runs.
func TestIdleDestinationsExit(t *testing.T) {
	t.Parallel()
	rcs := []*receiver{newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil)}
	pings := map[string]string{}
	for i, rc := range rcs {
		pings[fmt.Sprint("s", i)] = rc.URL + "/u"
	}
	n := New(Options{Pings: pings, Destinations: 1, Workers: 1})
	start(t, n)
	for round := range 3 {
		for i := range rcs {
			n.RunRecorded(record(fmt.Sprint("s", i), runA, scheduler.ResultSuccess, nil, tick0.Add(time.Duration(round)*time.Second)))
		}
	}
	for _, rc := range rcs {
		for range 3 {
			rc.next(t)
		}
	}
	waitFor(t, func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.workers == 0 && n.active == 0 && len(n.dests) == 0
	})
}

// A hung host holding the only slot yields it after its delivery in
// flight gives up: a healthy host waiting for a slot is not starved.
func TestHungDestinationYieldsItsSlot(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hung := newReceiver(t, func(http.ResponseWriter, hit) { <-release })
	ok := newReceiver(t, nil)
	n := New(Options{Pings: map[string]string{"hung": hung.URL + "/h", "ok": ok.URL + "/o"},
		Destinations: 1, Workers: 2, Timeout: 100 * time.Millisecond, Retries: -1})
	start(t, n)
	t.Cleanup(func() { close(release) })
	for i := range 3 {
		n.RunRecorded(record("hung", runA, scheduler.ResultSuccess, nil, tick0.Add(time.Duration(i)*time.Second)))
	}
	hung.next(t) // the hung host holds the slot
	for i := range 3 {
		n.RunRecorded(record("ok", runA, scheduler.ResultSuccess, nil, tick0.Add(time.Duration(i)*time.Second)))
	}
	for range 3 {
		ok.next(t)
	}
	n.mu.Lock()
	workers := n.workers
	n.mu.Unlock()
	if workers > 2 {
		t.Errorf("%d workers, want at most Destinations × Workers = 2", workers)
	}
}

// The kinds drops are told with are the kind labels metrics pre-creates.
func TestDropKindsAreMetricLabels(t *testing.T) {
	if kindPing.String() != metrics.NotifyPing || kindDecide.String() != metrics.NotifyNotification ||
		kindPost.String() != metrics.NotifyNotification {
		t.Errorf("kinds %q, %q, %q; want %q and %q", kindPing, kindDecide, kindPost, metrics.NotifyPing, metrics.NotifyNotification)
	}
}

// At shutdown a hung host holds the node up for one timeout at most: what
// it still has queued then is dropped and counted, not tried one by one.
func TestShutdownDropsWhatAHungHostHolds(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hung := newReceiver(t, func(http.ResponseWriter, hit) { <-release })
	t.Cleanup(func() { close(release) })
	var logs logBuf
	n := New(Options{Pings: map[string]string{"job": hung.URL + "/u"}, Workers: 1, Retries: -1,
		Timeout: 200 * time.Millisecond, Logger: testLogger(&logs)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	const pings = 8
	for i := range pings {
		n.RunRecorded(record("job", runA, scheduler.ResultSuccess, nil, tick0.Add(time.Duration(i)*time.Second)))
	}
	hung.next(t) // the first is in flight
	t0 := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context's end")
	}
	if d := n.Dropped(); d == 0 || d > pings-1 {
		t.Errorf("%d dropped at shutdown after %v, want those still queued when the grace ran out", d, time.Since(t0))
	}
	if c := strings.Count(logs.String(), "notification dropped"); c != 1 {
		t.Errorf("%d drop warnings, want 1; log:\n%s", c, logs.String())
	}
}
