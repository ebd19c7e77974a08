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
	skipReasons = []scheduler.SkipReason{scheduler.SkipContended, scheduler.SkipBackendError, scheduler.SkipStillRunning, scheduler.SkipPaused, scheduler.SkipMissed}
	runResults  = []scheduler.RunResult{scheduler.ResultSuccess, scheduler.ResultFailure, scheduler.ResultTimeout, scheduler.ResultLockLost, scheduler.ResultCancelled}
)

// Metrics holds every bext-scheduler metric. It implements
// scheduler.Observer and is safe for concurrent use.
type Metrics struct {
	ticks       *prometheus.CounterVec
	skipped     *prometheus.CounterVec
	runs        *prometheus.CounterVec
	runDuration *prometheus.HistogramVec
	lateness    *prometheus.HistogramVec
	nextTick    *prometheus.GaugeVec
	overruns    *prometheus.CounterVec
	clockOffset prometheus.Gauge
	triggers    *prometheus.CounterVec
	retries     *prometheus.CounterVec
	drift       prometheus.Gauge
	anomalies   *prometheus.CounterVec
	lastSuccess *prometheus.GaugeVec

	lockOps      *prometheus.CounterVec
	lockDuration *prometheus.HistogramVec
	heldLocks    *prometheus.GaugeVec

	ready *Readiness

	// perScheduleHistograms: the two histograms have a series per
	// schedule, else one per node (schedule label "", i.e. absent).
	perScheduleHistograms bool

	mu         sync.Mutex
	seen       map[string]bool          // schedules whose series are initialised
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

// RunRecorded counts a manual run, the retries of a run and its duration
// anomalies, and sets the last-success gauge when it succeeded.
func (m *Metrics) RunRecorded(r scheduler.RunRecord) {
	m.AddSchedule(r.Schedule)
	if r.Manual {
		m.triggers.WithLabelValues(r.Schedule).Inc()
	}
	if r.Attempts > 1 {
		m.retries.WithLabelValues(r.Schedule).Add(float64(r.Attempts - 1))
	}
	if r.Overrun {
		m.anomalies.WithLabelValues(r.Schedule, AnomalyOverrun).Inc()
	}
	if r.Result != scheduler.ResultSuccess {
		return
	}
	m.mu.Lock()
	floor := m.minRuntime[r.Schedule]
	m.mu.Unlock()
	if floor > 0 && r.Duration < floor {
		m.anomalies.WithLabelValues(r.Schedule, AnomalyTooFast).Inc()
	}
	// The time the run finished, on the clock that timed it.
	end := r.Start.Add(r.Duration)
	m.lastSuccess.WithLabelValues(r.Schedule).Set(float64(end.UnixNano()) / 1e9)
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
	m := &Metrics{
		ticks: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bext_scheduler_ticks_total",
			Help: "Ticks fired by this node, per schedule.",
		}, []string{"schedule"})),
		skipped: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bext_scheduler_ticks_skipped_total",
			Help: "Fired ticks this node did not run, per schedule and reason (contended, backend_error, still_running, paused, missed).",
		}, []string{"schedule", "reason"})),
		runs: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bext_scheduler_runs_total",
			Help: "Job runs finished on this node, per schedule and result (success, failure, timeout, lock_lost, cancelled).",
		}, []string{"schedule", "result"})),
		runDuration: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bext_scheduler_run_duration_seconds",
			Help:    "How long job runs took, per schedule.",
			Buckets: runDurationBuckets,
		}, []string{"schedule"})),
		lateness: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bext_scheduler_tick_lateness_seconds",
			Help:    "How long after its scheduled time a tick was handled, per schedule.",
			Buckets: latenessBuckets,
		}, []string{"schedule"})),
		nextTick: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bext_scheduler_next_tick_timestamp_seconds",
			Help: "Unix time of the schedule's next tick.",
		}, []string{"schedule"})),
		overruns: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bext_scheduler_overruns_total",
			Help: "Job runs that took longer than the schedule's expected_runtime.",
		}, []string{"schedule"})),
		lockOps: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bext_locking_operations_total",
			Help: "Lock operations, per backend, op (try_lock, renew, release) and result (acquired, contended, ok, lost, error; try-lock-tick also done, paused, missed).",
		}, []string{"backend", "op", "result"})),
		lockDuration: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bext_locking_operation_duration_seconds",
			Help:    "How long lock operations took, per backend and op.",
			Buckets: lockOpBuckets,
		}, []string{"backend", "op"})),
		heldLocks: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bext_locking_held_locks",
			Help: "Locks this process holds now, per backend.",
		}, []string{"backend"})),
		clockOffset: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bext_scheduler_clock_offset_seconds",
			Help: "This node's clock minus the lock backend's, measured on the last try-lock-tick.",
		})),
		triggers: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bext_scheduler_triggers_total",
			Help: "Manual runs (trigger, backfill) this node ran, per schedule.",
		}, []string{"schedule"})),
		retries: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bext_scheduler_retries_total",
			Help: "Failed attempts retried within their tick, per schedule.",
		}, []string{"schedule"})),
		drift: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bext_cluster_config_drift",
			Help: "1 when the live nodes run different schedule definitions, else 0.",
		})),
		anomalies: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bext_scheduler_run_anomalies_total",
			Help: "Runs on this node whose duration is suspicious, per schedule and kind (too_fast: a success under min_runtime; overrun: over expected_runtime).",
		}, []string{"schedule", "kind"})),
		lastSuccess: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bext_scheduler_last_success_timestamp_seconds",
			Help: "Unix time this node last finished a successful run of the schedule; absent until it has. Alert on time() - max by (schedule) over the nodes.",
		}, []string{"schedule"})),
		ready:                 newReadiness(o.now, o.readyWindow),
		seen:                  map[string]bool{},
		minRuntime:            map[string]time.Duration{},
		perScheduleHistograms: o.perScheduleHistograms,
	}
	if !m.perScheduleHistograms { // the node's series exist from the start
		m.runDuration.WithLabelValues("")
		m.lateness.WithLabelValues("")
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "bext_scheduler_build_info",
		Help:        "Always 1; the labels say which build runs.",
		ConstLabels: prometheus.Labels{"version": build.Version, "commit": build.Commit, "goversion": build.GoVersion},
	})
	buildInfo.Set(1)
	register(reg, buildInfo)
	register(reg, collectors.NewGoCollector())
	register(reg, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
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
func (m *Metrics) AddSchedule(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[id] {
		return
	}
	m.seen[id] = true
	m.ticks.WithLabelValues(id)
	for _, r := range skipReasons {
		m.skipped.WithLabelValues(id, string(r))
	}
	for _, r := range runResults {
		m.runs.WithLabelValues(id, string(r))
	}
	m.overruns.WithLabelValues(id)
	for _, k := range anomalyKinds {
		m.anomalies.WithLabelValues(id, k)
	}
	// Not the last-success gauge: absent until a success, so an alert on
	// its age cannot fire on a fresh deploy (0 would read as 1970).
	m.triggers.WithLabelValues(id)
	m.retries.WithLabelValues(id)
	if m.perScheduleHistograms {
		m.runDuration.WithLabelValues(id)
		m.lateness.WithLabelValues(id)
	}
}

// histLabel is the schedule label of id's histogram series.
func (m *Metrics) histLabel(id string) string {
	if m.perScheduleHistograms {
		return id
	}
	return ""
}

// TickFired counts the tick and records its lateness.
func (m *Metrics) TickFired(id string, _ time.Time, lateness time.Duration) {
	m.AddSchedule(id)
	m.ticks.WithLabelValues(id).Inc()
	m.lateness.WithLabelValues(m.histLabel(id)).Observe(max(lateness, 0).Seconds())
}

// TickSkipped counts the skip under its reason.
func (m *Metrics) TickSkipped(id string, _ time.Time, reason scheduler.SkipReason) {
	m.AddSchedule(id)
	m.skipped.WithLabelValues(id, string(reason)).Inc()
}

// RunFinished counts the run under its result, records its duration, and
// counts an overrun.
func (m *Metrics) RunFinished(id string, _ time.Time, result scheduler.RunResult, d time.Duration, overrun bool) {
	m.AddSchedule(id)
	m.runs.WithLabelValues(id, string(result)).Inc()
	m.runDuration.WithLabelValues(m.histLabel(id)).Observe(max(d, 0).Seconds())
	if overrun {
		m.overruns.WithLabelValues(id).Inc()
	}
}

// NextTick sets the schedule's next-tick gauge; the zero time (schedule
// removed) deletes the gauge's series, so a removed schedule does not show
// a next tick forever. Its counters stay: they are history.
func (m *Metrics) NextTick(id string, next time.Time) {
	if next.IsZero() {
		m.nextTick.DeleteLabelValues(id)
		return
	}
	m.nextTick.WithLabelValues(id).Set(float64(next.UnixNano()) / 1e9)
}

// Readiness is the readiness check that InstrumentLocker feeds.
func (m *Metrics) Readiness() *Readiness { return m.ready }

// Ready is Readiness().Ready: the /readyz check.
func (m *Metrics) Ready(ctx context.Context) error { return m.ready.Ready(ctx) }
