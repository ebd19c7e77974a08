// Package node runs one bext-scheduler node: the composition root that
// the CLI's `run` is a thin shell over, and the API for a Go program that
// embeds the scheduler.
//
// New assembles, from a loaded config, everything a node is: the lock
// backend, the tick engine (scheduler), the agent that does the node's
// cluster duties (announce, history, manual runs, pause after failures,
// drift), the notifier (pings and failure notifications), the metrics, and
// the HTTP server (health, metrics, the API and the status page). Run
// starts them in order and stops them in the reverse order under one
// lifecycle; Reload applies a re-read config without dropping a held lock
// or a running job.
//
// An embedding program declares its schedules in TOML as operators do,
// names those whose job is one of its Go functions (config.WithGoJobs),
// and gives the functions in Options.Jobs. It gets every cluster feature
// the binary has: pause, trigger, backfill, history, the API and page,
// drift, notifications.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/server"
	"github.com/bext-dev/bext-scheduler/internal/service"
	"github.com/bext-dev/bext-scheduler/internal/tracing"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/metrics"
	"github.com/bext-dev/bext-scheduler/notify"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Errors. New's errors wrap ErrConfig (the CLI exits 2 on them); Run's
// are the node failing (the CLI exits 1).
var (
	ErrConfig = errors.New("node: invalid configuration")
	// ErrRunning: Run was called twice.
	ErrRunning = errors.New("node: already run")
)

// Options are what a config file does not say.
type Options struct {
	// Logger receives the node's logs; nil logs to stderr as the
	// config's [log] says.
	Logger *slog.Logger
	// Version and Commit are reported in the build info metric and to
	// the cluster (drift across versions); "dev" and "unknown" when empty.
	Version, Commit string
	// Jobs are the Go functions of the schedules the config marks GoJob
	// (config.WithGoJobs), by schedule id. Every such schedule needs one
	// (New and Reload refuse a config with one missing); a function no
	// schedule takes yet waits for a reload that adds it.
	Jobs map[string]scheduler.Job
	// Clock is the engine's clock; nil is the real one.
	Clock scheduler.Clock
	// ReleaseSchedules lets New drop cfg.Scheduled once it has built the
	// node from them (at 100,000 schedules the parsed form is several
	// times what the node keeps); the caller must not read them after.
	ReleaseSchedules bool
}

// Node is one running node. Build it with New, run it with Run.
type Node struct {
	started  *config.Config // the config New was given: what a reload is compared against
	opts     Options
	logger   *slog.Logger
	backend  service.Backend
	closer   locking.Locker // the instrumented backend, closed at the end
	metrics  *metrics.Metrics
	registry *prometheus.Registry
	notifier *notify.Notifier
	agent    *agent.Agent // nil without a backend that keeps cluster state
	sched    *scheduler.Scheduler
	tracer   *tracing.Tracer // nil: the OTEL_* environment asks for no traces
	ops      *ops.Service
	srv      *server.Server // nil with [http] listen = "off"
	// httpConns is the cap on srv's connections (httpConnCap) and
	// fdLimit the descriptor limit it was sized from (0: unknown).
	httpConns int
	fdLimit   uint64

	nScheduled int
	version    string

	reloadMu sync.Mutex
	ranOnce  sync.Once
	ready    chan struct{}
}

// New builds a node from cfg, a config that config.Load, config.Parse or
// config.Config.Validate accepted. It opens the lock backend without
// waiting for it to answer (a node starts while Redis or Postgres is
// down, reports not ready, and recovers by itself). Its errors wrap
// ErrConfig; nothing is left open when it fails.
func New(ctx context.Context, cfg *config.Config, opts Options) (*Node, error) {
	if err := checkJobs(cfg, opts.Jobs); err != nil {
		return nil, err
	}
	n := &Node{started: cfg, opts: opts, ready: make(chan struct{})}
	n.version = opts.Version
	if n.version == "" {
		n.version = "dev"
	}
	commit := opts.Commit
	if commit == "" {
		commit = "unknown"
	}
	n.logger = opts.Logger
	if n.logger == nil {
		n.logger = service.Logger(nil, cfg.Log).With("node", cfg.NodeID)
	}
	clock := opts.Clock
	if clock == nil {
		c, err := service.Clock()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		clock = c
	}
	backend, err := service.OpenBackend(ctx, cfg, n.logger)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	n.backend = backend
	service.WarnDurability(ctx, backend, n.logger)
	n.registry = prometheus.NewRegistry()
	n.metrics = metrics.New(n.registry, metrics.BuildInfo{Version: n.version, Commit: commit, GoVersion: runtime.Version()},
		metrics.WithPerScheduleHistograms(cfg.Metrics.HistogramsPerSchedule(len(cfg.Scheduled))))
	var locker scheduler.Locker
	if backend.Locker != nil {
		il := metrics.InstrumentLocker(backend.Locker, backend.Name, n.metrics)
		locker, n.closer = il, il
	}
	// The schedules are built first, so everything else holds their ids
	// (compacted into one string) rather than the config's.
	schedules := service.Schedules(cfg, n.logger, opts.Jobs)
	service.CompactIDs(schedules)
	for _, s := range schedules {
		n.metrics.AddSchedule(s.ID)
	}
	// The notifier tells someone (ping_url, [notify] url); the agent does
	// the node's cluster duties on the uninstrumented backend (its calls
	// are not lock operations) and runs manual runs through the scheduler.
	n.notifier = newNotifier(cfg, backend.Locker, n.metrics, n.logger)
	applyNotify(cfg, n.notifier, n.metrics)
	observer := scheduler.Observers(n.metrics, notifierObserver{n: n.notifier})
	if ab, err := agent.For(backend.Locker); err == nil {
		n.agent = agent.New(ab, manualRunner{n}, agent.Options{
			NodeID: cfg.NodeID, Tags: cfg.Tags, Version: n.version, StartedAt: time.Now(), Keep: cfg.History.Keep,
			Mask: service.Masker(cfg), Drift: n.metrics.ConfigDrift, Paused: n.notifier.Paused, Logger: n.logger,
			// n.ops is set below, before the agent runs.
			Audit: func(ctx context.Context, ids []string) (map[string][]time.Time, error) {
				return n.ops.LostTickTimes(ctx, ids)
			},
			Lost:       n.metrics.SetLostTicks,
			LostTick:   n.notifier.Lost,
			AuditEvery: cfg.History.AuditEvery.Duration,
			Ready:      n.metrics.Ready,
			// n.sched is set below, before the agent runs.
			StopRun:    func(runID string) bool { return n.sched.StopRun(runID) },
			ReplaceRun: func(runID string) bool { return n.sched.ReplaceRun(runID) },
		})
		observer = scheduler.Observers(n.metrics, notifierObserver{n: n.notifier}, n.agent.Observer())
	}
	schedOpts := scheduler.Options{
		NodeID:        cfg.NodeID,
		Tags:          cfg.Tags,
		Locker:        locker,
		Backend:       backend.Kind,
		SafetyMargin:  cfg.Locking.SafetyMargin.Duration,
		MaxClockSkew:  cfg.Locking.MaxClockSkew.Duration,
		ShutdownGrace: cfg.ShutdownGrace.Duration,
		Clock:         clock,
		Observer:      observer,
		Logger:        n.logger,
	}
	if n.agent != nil { // a typed nil would not be a nil Preferrers
		service.Handoff(&schedOpts, cfg, backend, n.agent)
		schedOpts.History = n.agent
		schedOpts.ReplaceRuns = n.agent.ReplaceRuns
	}
	n.tracer, err = tracing.New(ctx, tracing.Options{NodeID: cfg.NodeID, Version: n.version})
	if err != nil {
		service.CloseBackend(n.closer, n.logger)
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if n.tracer != nil { // a typed nil would not be a nil RunTracer
		schedOpts.Tracer = n.tracer
		n.logger.Info("tracing runs to OpenTelemetry (OTLP over HTTP)")
	}
	// The agent's hashes of the schedules are computed while the
	// scheduler compiles them (neither writes to them): at 100,000
	// schedules each takes about a tenth of a start's CPU.
	var hashes func() agentHashes
	if n.agent != nil {
		hashes = hashSchedules(schedules)
	}
	n.sched, err = scheduler.New(schedOpts, schedules)
	if err != nil {
		if hashes != nil {
			hashes() // its goroutine ends before New returns
		}
		n.shutdownTracer(ctx)
		service.CloseBackend(n.closer, n.logger)
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if n.agent != nil {
		setAgentHashes(n.agent, cfg, schedules, hashes())
	}
	// The operators' API answers from the backend's cluster state (the
	// uninstrumented backend: its reads are not lock operations).
	var store ops.Store
	if st, ok := backend.Locker.(ops.Store); ok {
		store = st
	}
	n.ops = ops.New(store, schedules, ops.Options{By: "api " + cfg.NodeID, MaxClockSkew: cfg.Locking.MaxClockSkew.Duration, Keep: cfg.History.Keep})
	n.fdLimit = raiseDescriptorLimit(n.logger)
	if l := cfg.HTTP.Listen; l != "" && l != "off" {
		n.httpConns = httpConnCap(cfg.HTTP.MaxConnections, n.fdLimit)
		if n.httpConns < cfg.HTTP.MaxConnections {
			n.logger.Warn("[http] max_connections lowered to half the descriptor limit, so a connection flood leaves the rest to jobs",
				"max_connections", cfg.HTTP.MaxConnections, "serving", n.httpConns, "descriptor_limit", n.fdLimit)
		}
		n.srv = server.New(l, n.registry, n.metrics.Ready, n.logger, server.WithAPI(server.APIConfig{
			Ops: n.ops, Token: cfg.HTTP.Token, ReadToken: cfg.HTTP.ReadToken,
		}), server.WithMetrics(n.metrics.Handler(slog.NewLogLogger(n.logger.Handler(), slog.LevelError))),
			server.WithMaxConnections(n.httpConns), server.WithHosts(cfg.HTTP.Hosts))
	}
	n.nScheduled = len(cfg.Scheduled)
	if opts.ReleaseSchedules {
		cfg.ReleaseSchedules()
	}
	return n, nil
}

// checkJobs refuses a GoJob schedule without its function: a schedule
// whose id has a typo in Options.Jobs fails here rather than never runs.
// A function no schedule takes yet is no error: a reload may add it.
func checkJobs(cfg *config.Config, fns map[string]scheduler.Job) error {
	var problems []error
	for i := range cfg.Scheduled {
		s := &cfg.Scheduled[i]
		if !s.GoJob {
			continue
		}
		if fns[s.ID] == nil {
			problems = append(problems, fmt.Errorf("schedule %q: its job is a Go function, and Options.Jobs has none for it", s.ID))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(problems...))
	}
	return nil
}

// Run starts the node (the HTTP server, the notifier, the agent, then the
// scheduler) and runs it until ctx ends. It then stops them in reverse:
// no new tick fires, running jobs get shutdown_grace to finish (EndGrace
// ends it early), their results are recorded and notified, every lock is
// released and the server shut down, each on a fresh context. It returns
// nil on a clean stop. A node runs once.
func (n *Node) Run(ctx context.Context) error {
	first := false
	n.ranOnce.Do(func() { first = true })
	if !first {
		return ErrRunning
	}
	if n.srv != nil {
		if err := n.srv.Start(); err != nil {
			n.shutdownTracer(ctx)
			service.CloseBackend(n.closer, n.logger)
			return err
		}
		n.logger.Info("serving metrics and health", "addr", n.srv.Addr(),
			"api_writes", n.started.HTTP.Token != "", "api_read_token", n.started.HTTP.ReadToken != "",
			"max_connections", n.httpConns, "descriptor_limit", n.fdLimit)
		warnOpenReads(n.logger, n.started.HTTP, n.srv.Addr())
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// The notifier outlives the scheduler, so the results of runs that
	// end during the shutdown grace are still sent.
	notifyCtx, stopNotify := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { n.notifier.Run(notifyCtx) })
	ran := make(chan struct{}) // closed once the scheduler's runs have all ended
	agentDone := make(chan struct{})
	go func() { // owned by Run, which waits for it below
		defer close(agentDone)
		if n.agent != nil {
			// Its duties end with runCtx; the history only once the
			// scheduler's runs have all ended, so that runs ending during
			// the shutdown grace are recorded before the node stops.
			n.agent.Run(runCtx, ran)
		}
	}()
	backendName := n.backend.Name
	if backendName == "" {
		backendName = "none"
	}
	n.logger.Info("bext-scheduler started", "version", n.version, "config", n.started.Path,
		"schedules", n.nScheduled, "backend", backendName)
	close(n.ready)
	runErr := n.sched.Run(runCtx)
	stop()
	close(ran)
	<-agentDone
	stopNotify() // after the runs and the agent: results of runs ended at shutdown still go out
	wg.Wait()
	n.shutdownTracer(ctx) // after the runs: their spans are the last to send

	service.CloseBackend(n.closer, n.logger)
	if n.srv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := n.srv.Shutdown(sctx); err != nil {
			n.logger.Warn("http server shutdown", "err", err)
		}
		cancel()
	}
	if runErr != nil {
		return runErr
	}
	n.logger.Info("bext-scheduler stopped")
	return nil
}

// shutdownTracer sends the spans still queued, on a fresh context
// bounded like the server's shutdown.
func (n *Node) shutdownTracer(ctx context.Context) {
	if n.tracer == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := n.tracer.Shutdown(sctx); err != nil {
		n.logger.Warn("sending the last spans failed", "err", err)
	}
}

// Ready is closed once Run has started the server and is about to fire
// ticks. It is never closed when Run fails first (the server could not
// listen): wait on Run's return too.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Addr is the HTTP server's address once Ready ("" with the server off,
// or before).
func (n *Node) Addr() string {
	if n.srv == nil {
		return ""
	}
	return n.srv.Addr()
}

// EndGrace ends the shutdown grace at once: jobs still running are
// cancelled (SIGTERM, then SIGKILL after their kill grace). The CLI calls
// it on a second SIGINT/SIGTERM.
func (n *Node) EndGrace() { n.sched.EndGrace() }

// Reload applies a re-read config, next, as `run` does on SIGHUP:
// schedules added, removed and changed without dropping a held lock or a
// running job, pings and min_runtimes. The lock backend, node id, listen
// address, API tokens and [notify] need a restart: a change to them is
// logged and not applied (a backend swap under running jobs would drop
// their locks). Schedules the engine refuses keep the running ones, and
// the error says why. The comparison is always with the config the node
// started with: what runs, however many reloads came between.
func (n *Node) Reload(next *config.Config) error {
	if err := checkJobs(next, n.opts.Jobs); err != nil {
		return err
	}
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	started := n.started
	if !service.SameBackend(started, next) {
		n.logger.Warn("reload: [locking] backend settings changed; they apply at the next restart")
	}
	if next.NodeID != started.NodeID || next.HTTP.Listen != started.HTTP.Listen || !sameTags(next.Tags, started.Tags) {
		n.logger.Warn("reload: node_id, tags and [http] listen changes apply at the next restart")
	}
	next.Tags = started.Tags // what the scheduler runs by until then
	for _, s := range next.Scheduled {
		n.metrics.AddSchedule(s.ID)
	}
	schedules := service.Schedules(next, n.logger, n.opts.Jobs)
	if err := n.sched.Reload(schedules); err != nil {
		return fmt.Errorf("node: new schedules rejected; keeping the running ones: %w", err)
	}
	n.ops.SetSchedules(schedules)
	if n.agent != nil {
		setAgentSchedules(n.agent, next, schedules)
	}
	if next.HTTP.Token != started.HTTP.Token || next.HTTP.ReadToken != started.HTTP.ReadToken {
		n.logger.Warn("reload: [http] token and read_token changes apply at the next restart")
	}
	if next.HTTP.MaxConnections != started.HTTP.MaxConnections || !slices.Equal(next.HTTP.Hosts, started.HTTP.Hosts) {
		n.logger.Warn("reload: [http] max_connections and hosts changes apply at the next restart")
	}
	applyNotify(next, n.notifier, n.metrics)
	if !sameNotify(next.Notify, started.Notify) {
		n.logger.Warn("reload: [notify] changes apply at the next restart")
	}
	return nil
}

// sameTags reports whether two tag lists hold the same tags.
func sameTags(a, b []string) bool {
	return !slices.ContainsFunc(a, func(t string) bool { return !slices.Contains(b, t) }) &&
		!slices.ContainsFunc(b, func(t string) bool { return !slices.Contains(a, t) })
}

// manualRunner hands the agent's manual runs to the scheduler, which is
// built after the agent (the scheduler's observer includes the agent).
type manualRunner struct{ n *Node }

func (r manualRunner) RunManual(m scheduler.Manual) error { return r.n.sched.RunManual(m) }

// setAgentSchedules tells the agent the schedules it runs: their lock TTL
// (for a manual run), pause_after_failures, and definition hashes (drift).
func setAgentSchedules(ag *agent.Agent, cfg *config.Config, schedules []scheduler.Schedule) {
	setAgentHashes(ag, cfg, schedules, hashSchedules(schedules)())
}

// agentHashes are the schedules' definition hashes, as the agent
// announces them (ops.Hashes).
type agentHashes struct {
	byID   map[string]string
	fields *ops.FieldHashes
}

// rerunWindow is how late after its tick a lost run of s may be re-run:
// the tick's catch-up window (by default one period, measured from now).
func rerunWindow(c *config.Schedule, s scheduler.Schedule) time.Duration {
	switch w := c.Catchup(); w {
	case config.NoCatchup:
		return 0
	case 0:
		if s.Spec == nil {
			return 0
		}
		next := s.Spec.Next(time.Now())
		if after := s.Spec.Next(next); !next.IsZero() && !after.IsZero() {
			return after.Sub(next)
		}
		return 0
	default:
		return w
	}
}

// hashSchedules starts hashing schedules, which must not change until the
// function it returns, which waits for the hashes, has returned.
func hashSchedules(schedules []scheduler.Schedule) func() agentHashes {
	done := make(chan agentHashes, 1)
	go func() {
		byID, fields := ops.Hashes(schedules, time.Now())
		done <- agentHashes{byID: byID, fields: fields}
	}()
	return sync.OnceValue(func() agentHashes { return <-done })
}

// setAgentHashes is setAgentSchedules with the hashes computed.
func setAgentHashes(ag *agent.Agent, cfg *config.Config, schedules []scheduler.Schedule, h agentHashes) {
	defs := make([]agent.Schedule, len(schedules))
	for i, s := range schedules {
		exp := s.ExpectedRuntime
		if exp == 0 {
			exp = scheduler.DefaultExpectedRuntime
		}
		margin := cfg.Locking.SafetyMargin.Duration
		if margin == 0 {
			margin = scheduler.DefaultSafetyMargin
		}
		defs[i] = agent.Schedule{
			ID:                 s.ID,
			Elsewhere:          !scheduler.Matches(s.Nodes, cfg.Tags),
			TTL:                scheduler.LockTTL(exp, s.Jitter, margin, 0),
			PauseAfterFailures: s.PauseAfterFailures,
		}
		// Schedules holds one schedule per [[scheduled]], in order.
		if i < len(cfg.Scheduled) && cfg.Scheduled[i].ID == s.ID && cfg.Scheduled[i].OnNodeLoss == config.OnNodeLossRerun {
			defs[i].Rerun, defs[i].RerunWindow = true, rerunWindow(&cfg.Scheduled[i], s)
		}
	}
	ag.SetSchedules(defs, h.byID, ops.ConfigHash(h.byID))
	ag.SetFieldHashes(h.fields.Of)
}
