// Package metrics owns bext-scheduler's Prometheus metrics (the names and
// labels of DESIGN.md "Metrics (contract)"), the scheduler.Observer that
// feeds them, a locking.Locker decorator that measures every lock operation,
// and the readiness check behind /readyz.
//
// Everything is registered on a registry the caller passes in, never on the
// global one. Label values are schedule ids, backend names and fixed
// reason/result words: never URLs, tokens or other secrets.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// BuildInfo is exported as bext_scheduler_build_info.
type BuildInfo struct {
	Version, Commit, GoVersion string
}

// Bucket layouts. Jobs run from milliseconds to an hour; lateness is how far
// behind its fire time a tick was handled (normally ms, seconds when the
// node stalls); lock operations are one round trip.
var (
	runDurationBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	latenessBuckets    = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	lockOpBuckets      = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
)

var (
	skipReasons = []scheduler.SkipReason{scheduler.SkipContended, scheduler.SkipBackendError, scheduler.SkipStillRunning, scheduler.SkipPaused, scheduler.SkipMissed, scheduler.SkipGroupFull}
	runResults  = []scheduler.RunResult{scheduler.ResultSuccess, scheduler.ResultFailure, scheduler.ResultTimeout, scheduler.ResultLockLost, scheduler.ResultCancelled, scheduler.ResultReplaced}
)

// Metrics holds every bext-scheduler metric. It implements
// scheduler.Observer and is safe for concurrent use.
type Metrics struct {
	// sched holds the per-schedule series (schedules.go).
	sched *scheduleSet
	// The two histograms when they are per node (per-schedule histograms
	// off): one series each, without the schedule label. nil otherwise.
	runDuration prometheus.Histogram
	lateness    prometheus.Histogram

	clockOffset prometheus.Gauge
	drift       prometheus.Gauge

	notifyDropped *prometheus.CounterVec

	lockOps      *prometheus.CounterVec
	lockDuration *prometheus.HistogramVec
	heldLocks    *prometheus.GaugeVec

	// lostTicks has a series only for schedules with a lost tick, set by
	// the node that audits them (SetLostTicks); lostIDs are those series.
	lostTicks *prometheus.GaugeVec
	lostMu    sync.Mutex
	lostIDs   map[string]bool

	// fixed has every collector New registered on the caller's registry
	// except sched: Handler gathers it, then writes sched's series itself.
	fixed *prometheus.Registry

	ready *Readiness

	mu         sync.Mutex
	minRuntime map[string]time.Duration // schedule → min_runtime (absent: none)
}

var (
	_ scheduler.Observer      = (*Metrics)(nil)
	_ scheduler.ClockObserver = (*Metrics)(nil)
)

// Anomaly kinds: the kind label of bext_scheduler_run_anomalies_total.
const (
	AnomalyTooFast = "too_fast" // a success faster than min_runtime
	AnomalyOverrun = "overrun"  // a run longer than expected_runtime
)

var anomalyKinds = []string{AnomalyTooFast, AnomalyOverrun}

// Notification kinds: the kind label of bext_notify_dropped_total, the
// words notify's drops are told with.
const (
	NotifyPing         = "ping"         // a ping_url ping
	NotifyNotification = "notification" // a [notify] url POST (or its streak decision)
)

var notifyKinds = []string{NotifyPing, NotifyNotification}

// RunRecorded counts a manual run, the retries of a run and its duration
// anomalies, and sets the last-success gauge when it succeeded.
func (m *Metrics) RunRecorded(r scheduler.RunRecord) {
	se := m.sched.get(r.Schedule)
	if r.Manual {
		se.triggers.Add(1)
	}
	if r.Attempts > 1 {
		se.retries.Add(uint32(r.Attempts - 1))
	}
	if r.Overrun {
		se.anomalies[anomalyOverrunIdx].Add(1)
	}
	if r.Result != scheduler.ResultSuccess {
		return
	}
	m.mu.Lock()
	floor := m.minRuntime[r.Schedule]
	m.mu.Unlock()
	if floor > 0 && r.Duration < floor {
		se.anomalies[anomalyTooFastIdx].Add(1)
	}
	// The time the run finished, on the clock that timed it.
	end := r.Start.Add(r.Duration)
	se.lastSuccess.Store(math.Float64bits(float64(end.UnixNano()) / 1e9))
}

// SetMinRuntime sets schedule id's min_runtime: a successful run faster
// than d counts as a too_fast anomaly. 0 removes it. Call it at start and
// on every reload.
func (m *Metrics) SetMinRuntime(id string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d <= 0 {
		delete(m.minRuntime, id)
		return
	}
	m.minRuntime[id] = d
}

// ConfigDrift sets bext_cluster_config_drift.
func (m *Metrics) ConfigDrift(drift bool) {
	v := 0.0
	if drift {
		v = 1
	}
	m.drift.Set(v)
}

// NotifyDropped counts one dropped ping or notification under its kind
// (NotifyPing, NotifyNotification): notify.Options.OnDrop.
func (m *Metrics) NotifyDropped(kind string) { m.notifyDropped.WithLabelValues(kind).Inc() }

// ClockOffset sets bext_scheduler_clock_offset_seconds.
func (m *Metrics) ClockOffset(d time.Duration) { m.clockOffset.Set(d.Seconds()) }

// Option configures New.
type Option func(*options)

type options struct {
	now                   func() time.Time
	readyWindow           time.Duration
	perScheduleHistograms bool
}

// WithPerScheduleHistograms says whether the run-duration and lateness
// histograms have a series per schedule (true, the default) or one per
// node, without the schedule label (false). Each per-schedule histogram is
// about 17 series; at 100,000 schedules that is millions of series and
// gigabytes on the node and in Prometheus. The counters stay per schedule
// either way (the alerts of deploy/alerts.yml read them per schedule; the
// lateness alert sums the histogram over schedules).
func WithPerScheduleHistograms(on bool) Option {
	return func(o *options) { o.perScheduleHistograms = on }
}

// WithClock sets the clock the readiness check reads (tests inject one).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithReadyWindow sets how long a successful answer from the lock backend
// keeps the node ready without a ping. Default DefaultReadyWindow.
func WithReadyWindow(d time.Duration) Option { return func(o *options) { o.readyWindow = d } }

// New creates the metrics and registers them, with the Go and process
// collectors and the build-info gauge, on reg. Registering on a registry
// that already holds them reuses the registered collectors; any other
// registration conflict is a programming error and panics, as
// prometheus.MustRegister does.
func New(reg prometheus.Registerer, build BuildInfo, opts ...Option) *Metrics {
	o := options{now: time.Now, readyWindow: DefaultReadyWindow, perScheduleHistograms: true}
	for _, opt := range opts {
		opt(&o)
	}
	m := &Metrics{fixed: prometheus.NewRegistry(), minRuntime: map[string]time.Duration{}}
	m.sched = register(reg, newScheduleSet(o.perScheduleHistograms))
	if !o.perScheduleHistograms { // one series per node, there from the start
		m.runDuration = registerFixed(m, reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: famRunDuration.name, Help: famRunDuration.help, Buckets: runDurationBuckets,
		}))
		m.lateness = registerFixed(m, reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: famLateness.name, Help: famLateness.help, Buckets: latenessBuckets,
		}))
	}
	m.lockOps = registerFixed(m, reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bext_locking_operations_total",
		Help: "Lock operations, per backend, op (try_lock, renew, release) and result (acquired, contended, ok, lost, error; try-lock-tick also done, paused, missed).",
	}, []string{"backend", "op", "result"}))
	m.lockDuration = registerFixed(m, reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "bext_locking_operation_duration_seconds",
		Help:    "How long lock operations took, per backend and op.",
		Buckets: lockOpBuckets,
	}, []string{"backend", "op"}))
	m.heldLocks = registerFixed(m, reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bext_locking_held_locks",
		Help: "Locks this process holds now, per backend.",
	}, []string{"backend"}))
	m.lostTicks = registerFixed(m, reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bext_scheduler_ticks_lost",
		Help: "Ticks of the schedule lost in its recent window (the last 15 minutes, or its last two ticks): its tick mark passed them and history has neither a run nor a skip record of them (see `bext-scheduler audit`). Exported by the one live node that audits the schedule, and only while it has a lost tick.",
	}, []string{"schedule"}))
	m.clockOffset = registerFixed(m, reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bext_scheduler_clock_offset_seconds",
		Help: "This node's clock minus the lock backend's, measured on the last try-lock-tick.",
	}))
	m.drift = registerFixed(m, reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bext_cluster_config_drift",
		Help: "1 when the live nodes run different schedule definitions, else 0.",
	}))
	m.notifyDropped = registerFixed(m, reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bext_notify_dropped_total",
		Help: "Pings and notifications dropped because their destination's queue was full (its monitor or webhook is slow or down), per kind (ping, notification).",
	}, []string{"kind"}))
	for _, k := range notifyKinds { // at 0 from the start, for rate()
		m.notifyDropped.WithLabelValues(k)
	}
	m.ready = newReadiness(o.now, o.readyWindow)
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "bext_scheduler_build_info",
		Help:        "Always 1; the labels say which build runs.",
		ConstLabels: prometheus.Labels{"version": build.Version, "commit": build.Commit, "goversion": build.GoVersion},
	})
	buildInfo.Set(1)
	registerFixed(m, reg, prometheus.Collector(buildInfo))
	registerFixed(m, reg, collectors.NewGoCollector())
	registerFixed(m, reg, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// registerFixed registers c on reg (or takes the equal collector reg
// already has) and on m.fixed, the registry Handler gathers.
func registerFixed[C prometheus.Collector](m *Metrics, reg prometheus.Registerer, c C) C {
	c = register(reg, c)
	register(prometheus.Registerer(m.fixed), c)
	return c
}

// register registers c, or returns the equal collector reg already has.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(fmt.Sprintf("metrics: registering collector: %v", err))
}

// AddSchedule creates a schedule's series at zero, so dashboards and alerts
// see 0 for "never skipped" instead of a missing series. Observer methods
// call it for schedules they see first; calling it again is cheap.
// Not the last-success gauge: absent until a success, so an alert on its
// age cannot fire on a fresh deploy (0 would read as 1970).
func (m *Metrics) AddSchedule(id string) { m.sched.get(id) }

// TickFired counts the tick and records its lateness.
func (m *Metrics) TickFired(id string, _ time.Time, lateness time.Duration) {
	se := m.sched.get(id)
	se.ticks.Add(1)
	v := max(lateness, 0).Seconds()
	if m.lateness != nil {
		m.lateness.Observe(v)
		return
	}
	h := m.sched.hists(se)
	h.mu.Lock()
	h.lateness.observe(latenessBuckets, v)
	h.mu.Unlock()
}

// TickSkipped counts the skip under its reason.
func (m *Metrics) TickSkipped(id string, _ time.Time, reason scheduler.SkipReason) {
	se := m.sched.get(id)
	if i := skipIndex(reason); i >= 0 {
		se.skipped[i].Add(1)
	}
}

// RunFinished counts the run under its result, records its duration, and
// counts an overrun.
func (m *Metrics) RunFinished(id string, _ time.Time, result scheduler.RunResult, d time.Duration, overrun bool) {
	se := m.sched.get(id)
	if i := resultIndex(result); i >= 0 {
		se.runs[i].Add(1)
	}
	if overrun {
		se.overruns.Add(1)
	}
	v := max(d, 0).Seconds()
	if m.runDuration != nil {
		m.runDuration.Observe(v)
		return
	}
	h := m.sched.hists(se)
	h.mu.Lock()
	h.duration.observe(runDurationBuckets, v)
	h.mu.Unlock()
}

// NextTick sets the schedule's next-tick gauge; the zero time (schedule
// removed) deletes the gauge's series, so a removed schedule does not show
// a next tick forever. Its counters stay: they are history.
func (m *Metrics) NextTick(id string, next time.Time) {
	if next.IsZero() {
		if se := m.sched.lookup(id); se != nil {
			se.next.Store(0)
		}
		return
	}
	m.sched.get(id).next.Store(math.Float64bits(float64(next.UnixNano()) / 1e9))
}

// Readiness is the readiness check that InstrumentLocker feeds.
func (m *Metrics) Readiness() *Readiness { return m.ready }

// Ready is Readiness().Ready: the /readyz check.
func (m *Metrics) Ready(ctx context.Context) error { return m.ready.Ready(ctx) }

// SetLostTicks sets bext_scheduler_ticks_lost to lost: a series for each
// schedule in it (a count above 0), and none for the others, which this
// node no longer audits or which lost nothing lately. Series are set
// before the stale ones are deleted, so a scrape never sees a schedule
// that still has a lost tick go missing.
func (m *Metrics) SetLostTicks(lost map[string]int) {
	m.lostMu.Lock()
	defer m.lostMu.Unlock()
	next := make(map[string]bool, len(lost))
	for id, n := range lost {
		if n > 0 {
			m.lostTicks.WithLabelValues(id).Set(float64(n))
			next[id] = true
		}
	}
	for id := range m.lostIDs {
		if !next[id] {
			m.lostTicks.DeleteLabelValues(id)
		}
	}
	m.lostIDs = next
}
