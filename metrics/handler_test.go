package metrics

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// busy makes a Metrics with three schedules and a bit of every kind of
// observation, one of them with a schedule id that needs escaping.
func busy(t *testing.T, perSchedule bool) (*prometheus.Registry, *Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := New(reg, build, WithPerScheduleHistograms(perSchedule))
	l := InstrumentLocker(memory.New(), "memory", m)
	t.Cleanup(func() { _ = l.Close(t.Context()) })
	tick := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	odd := `we"ird\id` + "\n"
	for _, id := range []string{"a", "b", odd} {
		m.AddSchedule(id)
	}
	m.TickFired("a", tick, 30*time.Millisecond)
	m.TickFired("a", tick, 7*time.Second)
	m.TickSkipped("b", tick, scheduler.SkipPaused)
	m.TickSkipped(odd, tick, scheduler.SkipMissed)
	m.RunFinished("a", tick, scheduler.ResultSuccess, 1500*time.Millisecond, false)
	m.RunFinished("a", tick, scheduler.ResultTimeout, 2*time.Hour, true)
	m.RunRecorded(scheduler.RunRecord{Schedule: "a", Result: scheduler.ResultSuccess, Start: tick, Duration: time.Second, Manual: true, Attempts: 3})
	m.NextTick("a", tick.Add(24*time.Hour+time.Millisecond))
	m.NextTick("b", tick.Add(time.Hour))
	m.NextTick("b", time.Time{}) // removed
	m.NextTick(odd, tick.Add(time.Minute))
	m.ClockOffset(-3 * time.Millisecond)
	return reg, m
}

// scrape GETs m's handler, gzipped or not, and returns the text.
func scrape(t *testing.T, m *Metrics, gz bool) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler(nil))
	t.Cleanup(srv.Close)
	req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if gz {
		req.Header.Set("Accept-Encoding", "gzip") // set by hand: the transport then leaves the body gzipped
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want the text format 0.0.4", ct)
	}
	var body io.Reader = resp.Body
	if got := resp.Header.Get("Content-Encoding"); (got == "gzip") != gz {
		t.Fatalf("Content-Encoding %q with gzip asked = %v", got, gz)
	}
	if gz {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// canonical prints families sorted, each with its series sorted, in the
// text format: the same set of series prints the same bytes.
func canonical(t *testing.T, mfs []*dto.MetricFamily) string {
	t.Helper()
	sort.Slice(mfs, func(i, j int) bool { return mfs[i].GetName() < mfs[j].GetName() })
	var buf bytes.Buffer
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "go_") || strings.HasPrefix(mf.GetName(), "process_") {
			continue // they change between two reads
		}
		sort.SliceStable(mf.Metric, func(i, j int) bool {
			return fmt.Sprint(mf.Metric[i].GetLabel()) < fmt.Sprint(mf.Metric[j].GetLabel())
		})
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String()
}

func parse(t *testing.T, text string) []*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("/metrics is not valid text exposition: %v\n%s", err, text)
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		out = append(out, f)
	}
	return out
}

// /metrics serves exactly the series and values the registry holds,
// whichever way the histograms are kept, gzipped or not.
func TestHandlerServesWhatTheRegistryHolds(t *testing.T) {
	for _, perSchedule := range []bool{true, false} {
		for _, gz := range []bool{false, true} {
			t.Run(fmt.Sprintf("per_schedule_histograms=%v/gzip=%v", perSchedule, gz), func(t *testing.T) {
				reg, m := busy(t, perSchedule)
				served := scrape(t, m, gz)
				mfs, err := reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				want := canonical(t, mfs)
				got := canonical(t, parse(t, served))
				if got != want {
					t.Errorf("/metrics differs from the registry.\n/metrics:\n%s\nregistry:\n%s", got, want)
				}
			})
		}
	}
}

// The values a scrape shows, read from the text itself: a wrong slot or a
// lost observation shows here even if Collect had the same mistake.
func TestHandlerValues(t *testing.T) {
	_, m := busy(t, true)
	text := scrape(t, m, false)
	for _, line := range []string{
		`bext_scheduler_ticks_total{schedule="a"} 2`,
		`bext_scheduler_ticks_total{schedule="b"} 0`,
		`bext_scheduler_ticks_skipped_total{reason="paused",schedule="b"} 1`,
		`bext_scheduler_ticks_skipped_total{reason="contended",schedule="b"} 0`,
		`bext_scheduler_ticks_skipped_total{reason="missed",schedule="we\"ird\\id\n"} 1`,
		`bext_scheduler_runs_total{result="success",schedule="a"} 1`,
		`bext_scheduler_runs_total{result="timeout",schedule="a"} 1`,
		`bext_scheduler_runs_total{result="failure",schedule="a"} 0`,
		`bext_scheduler_overruns_total{schedule="a"} 1`,
		`bext_scheduler_triggers_total{schedule="a"} 1`,
		`bext_scheduler_retries_total{schedule="a"} 2`,
		`bext_scheduler_run_anomalies_total{kind="overrun",schedule="a"} 0`,
		`bext_scheduler_run_anomalies_total{kind="too_fast",schedule="b"} 0`,
		`bext_scheduler_next_tick_timestamp_seconds{schedule="a"} 1.796094000001e+09`,
		`bext_scheduler_last_success_timestamp_seconds{schedule="a"} 1.796007601e+09`,
		`bext_scheduler_tick_lateness_seconds_bucket{schedule="a",le="0.05"} 1`,
		`bext_scheduler_tick_lateness_seconds_bucket{schedule="a",le="10"} 2`,
		`bext_scheduler_tick_lateness_seconds_bucket{schedule="a",le="+Inf"} 2`,
		`bext_scheduler_tick_lateness_seconds_sum{schedule="a"} 7.03`,
		`bext_scheduler_tick_lateness_seconds_count{schedule="a"} 2`,
		`bext_scheduler_run_duration_seconds_bucket{schedule="a",le="1"} 0`,
		`bext_scheduler_run_duration_seconds_bucket{schedule="a",le="5"} 1`,
		`bext_scheduler_run_duration_seconds_bucket{schedule="a",le="3600"} 1`,
		`bext_scheduler_run_duration_seconds_bucket{schedule="a",le="+Inf"} 2`,
		`bext_scheduler_run_duration_seconds_count{schedule="b"} 0`,
		`bext_scheduler_clock_offset_seconds -0.003`,
		`bext_locking_held_locks{backend="memory"} 0`,
	} {
		if !strings.Contains(text, "\n"+line+"\n") {
			t.Errorf("/metrics has no line %s", line)
		}
	}
	for _, absent := range []string{
		`bext_scheduler_next_tick_timestamp_seconds{schedule="b"}`,    // removed
		`bext_scheduler_last_success_timestamp_seconds{schedule="b"}`, // never succeeded
	} {
		if strings.Contains(text, absent) {
			t.Errorf("/metrics has %s, want it absent", absent)
		}
	}
}

// Every schedule has every counter series at 0 from the start (alerts
// read them with rate(), which needs a series before the first event),
// and its histograms when they are per schedule; the last-success gauge
// is absent until a success.
func TestEverySeriesFromTheStart(t *testing.T) {
	for _, perSchedule := range []bool{true, false} {
		t.Run(fmt.Sprint("per_schedule_histograms=", perSchedule), func(t *testing.T) {
			_, m := busy(t, perSchedule)
			m.AddSchedule("fresh")
			fams := map[string]*dto.MetricFamily{}
			for _, f := range parse(t, scrape(t, m, false)) {
				fams[f.GetName()] = f
			}
			want := map[string]int{
				"bext_scheduler_ticks_total":         1,
				"bext_scheduler_ticks_skipped_total": len(skipReasons),
				"bext_scheduler_runs_total":          len(runResults),
				"bext_scheduler_overruns_total":      1,
				"bext_scheduler_run_anomalies_total": len(anomalyKinds),
				"bext_scheduler_triggers_total":      1,
				"bext_scheduler_retries_total":       1,
			}
			if perSchedule {
				want["bext_scheduler_run_duration_seconds"] = 1
				want["bext_scheduler_tick_lateness_seconds"] = 1
			}
			for name, n := range want {
				var got int
				for _, s := range fams[name].GetMetric() {
					for _, lp := range s.GetLabel() {
						if lp.GetName() == "schedule" && lp.GetValue() == "fresh" {
							got++
							if v := s.GetCounter().GetValue() + float64(s.GetHistogram().GetSampleCount()); v != 0 {
								t.Errorf("%s%v = %v, want 0", name, s.GetLabel(), v)
							}
						}
					}
				}
				if got != n {
					t.Errorf("%s: %d series for a fresh schedule, want %d", name, got, n)
				}
			}
			if !perSchedule {
				for _, name := range []string{"bext_scheduler_run_duration_seconds", "bext_scheduler_tick_lateness_seconds"} {
					if ms := fams[name].GetMetric(); len(ms) != 1 || len(ms[0].GetLabel()) != 0 {
						t.Errorf("%s: %d series (%v), want one without labels", name, len(ms), ms)
					}
				}
			}
			for _, s := range fams["bext_scheduler_last_success_timestamp_seconds"].GetMetric() {
				if slices.ContainsFunc(s.GetLabel(), func(lp *dto.LabelPair) bool { return lp.GetValue() == "fresh" }) {
					t.Error("a fresh schedule has a last-success gauge, want none until a success")
				}
			}
		})
	}
}

// promtool, the Prometheus project's own checker, accepts /metrics.
func TestHandlerPassesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not on PATH: run scripts/test-services (or apt-get install prometheus)")
	}
	_, m := busy(t, true)
	text := scrape(t, m, false)
	// The schedule id with a newline and quotes is valid exposition, but
	// promtool's lint is about names; keep its input to plain ids.
	cmd := exec.CommandContext(t.Context(), promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// A schedule's series cost a small fixed record, not a few kilobytes of
// vector children: 100,000 schedules, every series created, stay under
// 300 bytes of heap each (about 130 today: the record and its map entry).
func TestHeapPerSchedule(t *testing.T) {
	const n = 100_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%06d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := New(prometheus.NewRegistry(), build, WithPerScheduleHistograms(false))
	for _, id := range ids {
		m.AddSchedule(id)
		m.NextTick(id, time.Unix(1_800_000_000, 0))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes of heap per schedule", per)
	if per > 300 {
		t.Errorf("%.0f bytes of heap per schedule, want at most 300", per)
	}
	runtime.KeepAlive(m)
}
