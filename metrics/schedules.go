package metrics

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The per-schedule series live here, not in CounterVec and HistogramVec
// children: a child is a label map, a created timestamp and a few hundred
// bytes of bookkeeping per series, and a schedule has 17 series (plus two
// histograms when they are per schedule). At 100,000 schedules that was
// 7 KB per schedule, 4 s of CPU to create them at start, and a scrape that
// built two million protobuf messages before writing a byte. Here a
// schedule is one fixed-size record of atomic counters, found through one
// map entry, and a scrape writes the text exposition straight from the
// records (writeText); the registry sees the same series, as const
// metrics, through Collect.

// family is one per-schedule metric family: its name, help and type, the
// one place Describe, Collect and writeText take them from.
type family struct {
	name, help string
	typ        prometheus.ValueType // CounterValue or GaugeValue; histograms have their own
	label      string               // the second label besides schedule ("" for none)
	values     []string             // that label's fixed values, in slot order
}

var (
	famTicks = family{name: "bext_scheduler_ticks_total", typ: prometheus.CounterValue,
		help: "Ticks fired by this node, per schedule."}
	famSkipped = family{name: "bext_scheduler_ticks_skipped_total", typ: prometheus.CounterValue,
		help:  "Fired ticks this node did not run, per schedule and reason (contended, backend_error, still_running, paused, missed, group_full).",
		label: "reason", values: words(skipReasons)}
	famRuns = family{name: "bext_scheduler_runs_total", typ: prometheus.CounterValue,
		help:  "Job runs finished on this node, per schedule and result (success, failure, timeout, lock_lost, cancelled, replaced).",
		label: "result", values: words(runResults)}
	famOverruns = family{name: "bext_scheduler_overruns_total", typ: prometheus.CounterValue,
		help: "Job runs that took longer than the schedule's expected_runtime."}
	famTriggers = family{name: "bext_scheduler_triggers_total", typ: prometheus.CounterValue,
		help: "Manual runs (trigger, backfill) this node ran, per schedule."}
	famRetries = family{name: "bext_scheduler_retries_total", typ: prometheus.CounterValue,
		help: "Failed attempts retried within their tick, per schedule."}
	famAnomalies = family{name: "bext_scheduler_run_anomalies_total", typ: prometheus.CounterValue,
		help:  "Runs on this node whose duration is suspicious, per schedule and kind (too_fast: a success under min_runtime; overrun: over expected_runtime).",
		label: "kind", values: anomalyKinds}
	famNextTick = family{name: "bext_scheduler_next_tick_timestamp_seconds", typ: prometheus.GaugeValue,
		help: "Unix time of the schedule's next tick."}
	famLastSuccess = family{name: "bext_scheduler_last_success_timestamp_seconds", typ: prometheus.GaugeValue,
		help: "Unix time this node last finished a successful run of the schedule; absent until it has. Alert on time() - max by (schedule) over the nodes."}

	famRunDuration = family{name: "bext_scheduler_run_duration_seconds", help: "How long job runs took, per schedule."}
	famLateness    = family{name: "bext_scheduler_tick_lateness_seconds", help: "How long after its scheduled time a tick was handled, per schedule."}
)

func words[S ~string](ws []S) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = string(w)
	}
	return out
}

// maxValues is the most values one family has per schedule (the skip
// reasons).
const maxValues = 6

// skipIndex and resultIndex are the slots of skipReasons and runResults;
// -1 for a word the contract does not list (not counted: a new reason
// must be added to the contract, the alerts and skipReasons together).
func skipIndex(r scheduler.SkipReason) int {
	for i, w := range skipReasons {
		if w == r {
			return i
		}
	}
	return -1
}

func resultIndex(r scheduler.RunResult) int {
	for i, w := range runResults {
		if w == r {
			return i
		}
	}
	return -1
}

const (
	anomalyTooFastIdx = 0 // anomalyKinds[0]
	anomalyOverrunIdx = 1
)

// series is one schedule's counters and gauges. The counters are 32 bits:
// a schedule fires at most once a second, so its busiest counter wraps
// after 136 years (and a wrap reads as a counter reset to rate()); 32 bits
// instead of 64 save 64 bytes a schedule.
type series struct {
	id        string
	ticks     atomic.Uint32
	skipped   [6]atomic.Uint32 // by skipIndex (len(skipReasons); TestSeriesSized)
	runs      [6]atomic.Uint32 // by resultIndex
	overruns  atomic.Uint32
	anomalies [2]atomic.Uint32 // by anomalyKinds
	triggers  atomic.Uint32
	retries   atomic.Uint32
	// The gauges hold math.Float64bits of a Unix time; 0 is absent (no
	// next tick: the schedule was removed; no success yet).
	next        atomic.Uint64
	lastSuccess atomic.Uint64
	// hist is nil until the schedule's first observation when the
	// histograms are per schedule (a schedule that never ran shows
	// zeros, from zeroHist), and always nil when they are per node.
	hist atomic.Pointer[histPair]
}

// histPair is a schedule's two histograms, under one lock so a scrape
// never sees a count that disagrees with its buckets.
type histPair struct {
	mu       sync.Mutex
	lateness hist
	duration hist
}

// hist is one histogram's state: per-bucket counts (not cumulative; the
// last one is +Inf), the count and the sum.
type hist struct {
	buckets []uint64
	count   uint64
	sum     float64
}

func newHist(bounds []float64) hist { return hist{buckets: make([]uint64, len(bounds)+1)} }

func (h *hist) observe(bounds []float64, v float64) {
	h.buckets[sort.SearchFloat64s(bounds, v)]++
	h.count++
	h.sum += v
}

// cumulative is h's buckets as NewConstHistogram wants them.
func (h *hist) cumulative(bounds []float64) map[float64]uint64 {
	out := make(map[float64]uint64, len(bounds))
	var c uint64
	for i, b := range bounds {
		c += h.buckets[i]
		out[b] = c
	}
	return out
}

func newHistPair() *histPair {
	return &histPair{lateness: newHist(latenessBuckets), duration: newHist(runDurationBuckets)}
}

// zeroHist is what a schedule without observations shows.
var zeroHist = newHistPair()

// chunkSize is how many series one allocation holds. Series never move
// (their atomics are read without a lock), so the set grows by chunks.
const chunkSize = 1024

// scheduleSet holds every schedule's series, in the order schedules were
// first seen. A schedule's counters are history: they stay when the
// schedule is removed by a reload (only its next-tick gauge goes).
type scheduleSet struct {
	perScheduleHist bool

	mu     sync.RWMutex
	index  map[string]int32
	chunks []*[chunkSize]series
	n      int

	descs map[string]*prometheus.Desc // by family name
}

func newScheduleSet(perScheduleHist bool) *scheduleSet {
	s := &scheduleSet{perScheduleHist: perScheduleHist, index: map[string]int32{}, descs: map[string]*prometheus.Desc{}}
	for _, f := range s.families() {
		labels := []string{"schedule"}
		if f.label != "" {
			labels = append(labels, f.label)
		}
		s.descs[f.name] = prometheus.NewDesc(f.name, f.help, labels, nil)
	}
	if perScheduleHist {
		for _, f := range []family{famRunDuration, famLateness} {
			s.descs[f.name] = prometheus.NewDesc(f.name, f.help, []string{"schedule"}, nil)
		}
	}
	return s
}

// families are the counter and gauge families, in exposition order.
func (s *scheduleSet) families() []family { return counterFamilies }

var counterFamilies = []family{famTicks, famSkipped, famRuns, famOverruns, famAnomalies, famTriggers, famRetries, famNextTick, famLastSuccess}

// get returns id's series, creating it (every counter at zero) when new.
func (s *scheduleSet) get(id string) *series {
	s.mu.RLock()
	i, ok := s.index[id]
	var se *series
	if ok {
		se = &s.chunks[i/chunkSize][i%chunkSize]
	}
	s.mu.RUnlock()
	if ok {
		return se
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[id]; ok {
		return &s.chunks[i/chunkSize][i%chunkSize]
	}
	if s.n%chunkSize == 0 {
		s.chunks = append(s.chunks, new([chunkSize]series))
	}
	i = int32(s.n)
	se = &s.chunks[i/chunkSize][i%chunkSize]
	se.id = id
	s.index[id] = i
	s.n++
	return se
}

// lookup returns id's series, or nil when it has none.
func (s *scheduleSet) lookup(id string) *series {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i, ok := s.index[id]
	if !ok {
		return nil
	}
	return &s.chunks[i/chunkSize][i%chunkSize]
}

// each calls f on every series, without holding the lock while f runs:
// series added meanwhile are left for the next scrape.
func (s *scheduleSet) each(f func(*series)) {
	s.mu.RLock()
	chunks, n := s.chunks, s.n
	s.mu.RUnlock()
	for i := 0; i < n; i++ {
		f(&chunks[i/chunkSize][i%chunkSize])
	}
}

// hists returns se's histograms, allocating them on first use.
func (s *scheduleSet) hists(se *series) *histPair {
	if h := se.hist.Load(); h != nil {
		return h
	}
	se.hist.CompareAndSwap(nil, newHistPair())
	return se.hist.Load()
}

// counters returns the values of f's series of se, in f.values order (one
// value when f has no second label), and whether the series exists.
func (se *series) counters(f family, buf *[maxValues]float64) ([]float64, bool) {
	one := func(v float64) ([]float64, bool) { buf[0] = v; return buf[:1], true }
	switch f.name {
	case famTicks.name:
		return one(float64(se.ticks.Load()))
	case famOverruns.name:
		return one(float64(se.overruns.Load()))
	case famTriggers.name:
		return one(float64(se.triggers.Load()))
	case famRetries.name:
		return one(float64(se.retries.Load()))
	case famSkipped.name:
		for i := range se.skipped {
			buf[i] = float64(se.skipped[i].Load())
		}
		return buf[:len(se.skipped)], true
	case famRuns.name:
		for i := range se.runs {
			buf[i] = float64(se.runs[i].Load())
		}
		return buf[:len(se.runs)], true
	case famAnomalies.name:
		for i := range se.anomalies {
			buf[i] = float64(se.anomalies[i].Load())
		}
		return buf[:len(se.anomalies)], true
	case famNextTick.name:
		return gauge(se.next.Load(), buf)
	case famLastSuccess.name:
		return gauge(se.lastSuccess.Load(), buf)
	}
	return nil, false
}

// gauge is a gauge's value from its bits; absent when 0.
func gauge(bits uint64, buf *[maxValues]float64) ([]float64, bool) {
	if bits == 0 {
		return nil, false
	}
	buf[0] = math.Float64frombits(bits)
	return buf[:1], true
}

// Describe sends the descriptors of every per-schedule family.
func (s *scheduleSet) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
}

// Collect sends every per-schedule series as a const metric: the
// registry's view (tests, Gather). /metrics writes them with writeText,
// which does not build a message per series.
func (s *scheduleSet) Collect(ch chan<- prometheus.Metric) {
	var buf [maxValues]float64
	s.each(func(se *series) {
		for _, f := range s.families() {
			vs, ok := se.counters(f, &buf)
			if !ok {
				continue
			}
			d := s.descs[f.name]
			if f.label == "" {
				ch <- prometheus.MustNewConstMetric(d, f.typ, vs[0], se.id)
				continue
			}
			for i, v := range vs {
				ch <- prometheus.MustNewConstMetric(d, f.typ, v, se.id, f.values[i])
			}
		}
		if !s.perScheduleHist {
			return
		}
		h := se.hist.Load()
		if h == nil {
			h = zeroHist
		}
		h.mu.Lock()
		ch <- prometheus.MustNewConstHistogram(s.descs[famRunDuration.name], h.duration.count, h.duration.sum, h.duration.cumulative(runDurationBuckets), se.id)
		ch <- prometheus.MustNewConstHistogram(s.descs[famLateness.name], h.lateness.count, h.lateness.sum, h.lateness.cumulative(latenessBuckets), se.id)
		h.mu.Unlock()
	})
}

// labelEscaper escapes a label value as the text exposition format wants.
var labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)

func appendLabelValue(b []byte, v string) []byte {
	if !strings.ContainsAny(v, "\\\n\"") {
		return append(b, v...)
	}
	return append(b, labelEscaper.Replace(v)...)
}

// appendFloat formats v as the text exposition format does (expfmt's
// writeFloat), so both ways of exposing a series print the same bytes.
func appendFloat(b []byte, v float64) []byte {
	switch {
	case v == 1:
		return append(b, '1')
	case v == 0:
		return append(b, '0')
	case v == -1:
		return append(b, "-1"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

func appendHeader(b []byte, name, help, typ string) []byte {
	b = append(b, "# HELP "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, helpEscaper.Replace(help)...)
	b = append(b, "\n# TYPE "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, typ...)
	return append(b, '\n')
}

// flushAt is the buffer size at which writeText hands its bytes on.
const flushAt = 64 << 10

// writeText writes every per-schedule family in the text exposition
// format (version 0.0.4) to w, family by family, from the records: no
// message per series, a buffer of flushAt bytes. Label names are in the
// order expfmt writes them (sorted; le last), so the bytes match what the
// registry would print for the same series, order of series aside.
func (s *scheduleSet) writeText(w func([]byte) error) error {
	b := make([]byte, 0, flushAt+4096)
	flush := func(force bool) error {
		if len(b) < flushAt && !force {
			return nil
		}
		err := w(b)
		b = b[:0]
		return err
	}
	var buf [maxValues]float64
	for _, f := range s.families() {
		typ := "counter"
		if f.typ == prometheus.GaugeValue {
			typ = "gauge"
		}
		// The label before schedule sorts first ("kind", "reason",
		// "result" < "schedule"): one prefix per value.
		prefixes := []string{f.name + `{schedule="`}
		if f.label != "" {
			prefixes = prefixes[:0]
			for _, v := range f.values {
				prefixes = append(prefixes, f.name+"{"+f.label+`="`+v+`",schedule="`)
			}
		}
		header := false
		var err error
		s.each(func(se *series) {
			if err != nil {
				return
			}
			vs, ok := se.counters(f, &buf)
			if !ok {
				return
			}
			if !header {
				b = appendHeader(b, f.name, f.help, typ)
				header = true
			}
			for i, v := range vs {
				b = append(b, prefixes[i]...)
				b = appendLabelValue(b, se.id)
				b = append(b, `"} `...)
				b = appendFloat(b, v)
				b = append(b, '\n')
			}
			err = flush(false)
		})
		if err != nil {
			return err
		}
	}
	if s.perScheduleHist {
		for _, f := range []struct {
			fam    family
			bounds []float64
			pick   func(*histPair) *hist
		}{
			{famRunDuration, runDurationBuckets, func(h *histPair) *hist { return &h.duration }},
			{famLateness, latenessBuckets, func(h *histPair) *hist { return &h.lateness }},
		} {
			les := make([]string, len(f.bounds)+1)
			for i, bound := range f.bounds {
				les[i] = string(appendFloat(nil, bound))
			}
			les[len(f.bounds)] = "+Inf"
			header := false
			var err error
			s.each(func(se *series) {
				if err != nil {
					return
				}
				if !header {
					b = appendHeader(b, f.fam.name, f.fam.help, "histogram")
					header = true
				}
				h := se.hist.Load()
				if h == nil {
					h = zeroHist
				}
				h.mu.Lock()
				hs := f.pick(h)
				var c uint64
				for i, le := range les {
					c += hs.buckets[i]
					b = append(b, f.fam.name...)
					b = append(b, `_bucket{schedule="`...)
					b = appendLabelValue(b, se.id)
					b = append(b, `",le="`...)
					b = append(b, le...)
					b = append(b, `"} `...)
					b = appendFloat(b, float64(c))
					b = append(b, '\n')
				}
				for _, part := range []struct {
					suffix string
					v      float64
				}{{"_sum", hs.sum}, {"_count", float64(hs.count)}} {
					b = append(b, f.fam.name...)
					b = append(b, part.suffix...)
					b = append(b, `{schedule="`...)
					b = appendLabelValue(b, se.id)
					b = append(b, `"} `...)
					b = appendFloat(b, part.v)
					b = append(b, '\n')
				}
				h.mu.Unlock()
				err = flush(false)
			})
			if err != nil {
				return err
			}
		}
	}
	return flush(true)
}
