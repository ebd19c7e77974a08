package notify

import (
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
