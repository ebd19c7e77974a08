package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/service"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/metrics"
	"github.com/bext-dev/bext-scheduler/notify"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/internal/server"
)

func newRunCmd() *cobra.Command {
	var path, nodeID, listen string
	c := &cobra.Command{
		Use:   "run",
		Short: "Run the scheduler on this node",
		Long: `run starts the service: it fires every schedule's ticks, takes the
cluster-wide lock for require_global (and prefer_global, when a backend is
configured) ticks, and serves /metrics, /healthz and /readyz on [http] listen.

Signals: SIGINT/SIGTERM stop firing, give running jobs shutdown_grace to
finish, cancel the rest, release every lock and exit 0; a second
SIGINT/SIGTERM during that grace ends it at once (running jobs are
cancelled: SIGTERM, then SIGKILL after their kill grace). SIGHUP re-reads the
config: an invalid one is logged and the running one kept; a valid one is
applied without dropping a held lock or a running job.

Flags win over the file.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if listen != "" && listen != "off" {
				if err := config.CheckListen(listen); err != nil {
					return usageErrorf("--listen %q: %v (or \"off\" to disable)", listen, err)
				}
			}
			restoreGC := startupGC()
			p := configPath(path)
			cfg, err := loadConfig(c.ErrOrStderr(), p)
			if err != nil {
				restoreGC()
				return err
			}
			o := overrides{nodeID: nodeID, listen: listen}
			o.apply(cfg)
			return serve(c.Context(), p, cfg, o, c.ErrOrStderr(), restoreGC)
		},
	}
	addConfigFlag(c, &path)
	c.Flags().StringVar(&nodeID, "node-id", "", "this node's id (default: node_id from the file, then the hostname)")
	c.Flags().StringVar(&listen, "listen", "", `address for /metrics /healthz /readyz (default: [http] listen; "off" disables)`)
	return c
}

// overrides are the command-line flags that win over the file, kept so a
// SIGHUP reload applies them again.
type overrides struct{ nodeID, listen string }

func (o overrides) apply(cfg *config.Config) {
	if o.nodeID != "" {
		cfg.NodeID = o.nodeID
	}
	if o.listen != "" {
		cfg.HTTP.Listen = o.listen
	}
}

func newLogger(w io.Writer, lc config.Log) *slog.Logger {
	var level slog.Level
	switch strings.ToLower(lc.Level) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if strings.ToLower(lc.Format) == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// startupGC makes the garbage collector run at a quarter of its default
// pace while the node loads its config and builds its schedules, and
// returns what restores it. Loading 100,000 schedules makes several times
// the node's live heap in garbage, and collecting it at the default pace
// was a fifth of the start's CPU (2.9 s against 2.3 s, for a peak RSS
// about 75 MiB higher; serve frees it all before the node is ready). An
// operator's GOGC or GOMEMLIMIT is left alone.
func startupGC() (restore func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	prev := debug.SetGCPercent(400)
	return sync.OnceFunc(func() { debug.SetGCPercent(prev) })
}

// serve runs the node until SIGINT/SIGTERM (or ctx ends). restoreGC ends
// startupGC's pace once the node is built.
func serve(parent context.Context, path string, cfg *config.Config, o overrides, stderr io.Writer, restoreGC func()) error {
	defer restoreGC() // on the early returns
	if parent == nil {
		parent = context.Background()
	}
	logger := newLogger(stderr, cfg.Log).With("node", cfg.NodeID)

	clock, err := service.Clock()
	if err != nil {
		return withCode(exitUsage, err)
	}
	backend, err := service.OpenBackend(parent, cfg, logger)
	if err != nil {
		return withCode(exitUsage, err)
	}
	v, cm := buildVersion()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{Version: v, Commit: cm, GoVersion: runtime.Version()},
		metrics.WithPerScheduleHistograms(cfg.Metrics.HistogramsPerSchedule(len(cfg.Scheduled))))
	var locker scheduler.Locker
	var closer locking.Locker
	if backend.Locker != nil {
		il := metrics.InstrumentLocker(backend.Locker, backend.Name, m)
		locker, closer = il, il
	}
	// The schedules are built first, so everything else holds their ids
	// (compacted into one string) rather than the config's.
	schedules := service.Schedules(cfg, logger)
	service.CompactIDs(schedules)
	for _, s := range schedules {
		m.AddSchedule(s.ID)
	}
	// The notifier tells someone (ping_url, [notify] url); the agent does
	// the node's cluster duties (announce, history, manual runs, drift) on
	// the uninstrumented backend (its calls are not lock operations) and
	// runs manual runs through the scheduler.
	notifier := newNotifier(cfg, backend.Locker, m, logger)
	applyNotify(cfg, notifier, m)
	var ag *agent.Agent
	var sched *scheduler.Scheduler
	observer := scheduler.Observers(m, notifierObserver{n: notifier})
	if ab, err := agent.For(backend.Locker); err == nil {
		ag = agent.New(ab, runner{&sched}, agent.Options{
			NodeID: cfg.NodeID, Version: v, StartedAt: time.Now(), Keep: cfg.History.Keep,
			Mask: service.Masker(cfg), Drift: m.ConfigDrift, Paused: notifier.Paused, Logger: logger,
		})
		observer = scheduler.Observers(m, notifierObserver{n: notifier}, ag.Observer())
	}
	schedOpts := scheduler.Options{
		NodeID:        cfg.NodeID,
		Locker:        locker,
		Backend:       backend.Kind,
		SafetyMargin:  cfg.Locking.SafetyMargin.Duration,
		MaxClockSkew:  cfg.Locking.MaxClockSkew.Duration,
		ShutdownGrace: cfg.ShutdownGrace.Duration,
		Clock:         clock,
		Observer:      observer,
		Logger:        logger,
	}
	if ag != nil { // a typed nil would not be a nil Preferrers
		service.Handoff(&schedOpts, cfg, backend, ag)
	}
	sched, err = scheduler.New(schedOpts, schedules)
	if err != nil {
		closeLocker(closer, logger)
		return withCode(exitUsage, fmt.Errorf("invalid config: %w", err))
	}
	if ag != nil {
		setAgentSchedules(ag, cfg, schedules)
	}

	// The operators' API answers from the backend's cluster state (the
	// uninstrumented backend: its reads are not lock operations).
	var store ops.Store
	if st, ok := backend.Locker.(ops.Store); ok {
		store = st
	}
	opsSvc := ops.New(store, schedules, ops.Options{By: "api " + cfg.NodeID, MaxClockSkew: cfg.Locking.MaxClockSkew.Duration})

	// Everything is built from the config's schedules: drop them, and give
	// the memory that loading them took back to the system now, before
	// the node reports ready, rather than over the next minutes (at
	// 100,000 schedules the parse's garbage is several times what the
	// node keeps).
	nScheduled := len(cfg.Scheduled)
	cfg.ReleaseSchedules()
	restoreGC()
	debug.FreeOSMemory()

	var srv *server.Server
	if l := cfg.HTTP.Listen; l != "" && l != "off" {
		srv = server.New(l, reg, m.Ready, logger, server.WithAPI(server.APIConfig{
			Ops: opsSvc, Token: cfg.HTTP.Token, ReadToken: cfg.HTTP.ReadToken,
		}), server.WithMetrics(m.Handler(slog.NewLogLogger(logger.Handler(), slog.LevelError))))
		if err := srv.Start(); err != nil {
			closeLocker(closer, logger)
			return withCode(exitFailure, err)
		}
		logger.Info("serving metrics and health", "addr", srv.Addr(), "api_writes", cfg.HTTP.Token != "", "api_read_token", cfg.HTTP.ReadToken != "")
	}

	ctx, stop := context.WithCancel(parent)
	defer stop()
	term := make(chan os.Signal, 2)
	signal.Notify(term, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(term)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	ran := make(chan struct{}) // closed when sched.Run has returned
	sigDone := make(chan struct{})
	go func() { // owned by serve, which waits for it after ran is closed
		defer close(sigDone)
		select {
		case s := <-term:
			logger.Info("signal received: stopping", "signal", s.String(), "grace", cfg.ShutdownGrace.Duration)
			stop()
		case <-ctx.Done():
		case <-ran:
			return
		}
		select {
		case s := <-term:
			logger.Warn("second signal: ending the shutdown grace now, cancelling running jobs", "signal", s.String())
			sched.EndGrace()
		case <-ran:
		}
	}()

	reloadDone := make(chan struct{})
	go func() { // owned by serve: ends when ctx does, and serve waits for it
		defer close(reloadDone)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload(path, cfg, o, sched, opsSvc, ag, m, notifier, logger)
			}
		}
	}()

	backendName := backend.Name
	if backendName == "" {
		backendName = "none"
	}
	// issue 19 (notify): the notifier outlives the scheduler, so the
	// results of runs that end during shutdown are still sent.
	notifyCtx, stopNotify := context.WithCancel(context.WithoutCancel(parent))
	notifyDone := make(chan struct{})
	go func() { defer close(notifyDone); notifier.Run(notifyCtx) }()

	logger.Info("bext-scheduler started", "version", v, "config", cfg.Path,
		"schedules", nScheduled, "backend", backendName)
	agentDone := make(chan struct{})
	go func() { // owned by serve, which waits for it below
		defer close(agentDone)
		if ag != nil {
			// Its duties end with ctx; the history only once the
			// scheduler's runs have all ended (ran), so that runs ending
			// during the shutdown grace are recorded before the node exits.
			ag.Run(ctx, ran)
		}
	}()
	runErr := sched.Run(ctx)
	stop()
	close(ran)
	<-sigDone
	<-reloadDone
	<-agentDone
	stopNotify() // after the run and the agent: results of runs ended at shutdown still go out
	<-notifyDone

	// Cleanup runs on a fresh context: the run context is already cancelled.
	closeLocker(closer, logger)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(parent), 5*time.Second)
		if err := srv.Shutdown(sctx); err != nil {
			logger.Warn("http server shutdown", "err", err)
		}
		cancel()
	}
	if runErr != nil {
		return withCode(exitFailure, runErr)
	}
	logger.Info("bext-scheduler stopped")
	return nil
}

// runner hands the agent's manual runs to the scheduler, made after the
// agent (the scheduler's observer includes the agent).
type runner struct{ s **scheduler.Scheduler }

func (r runner) RunManual(m scheduler.Manual) error { return (*r.s).RunManual(m) }

// setAgentSchedules tells the agent the schedules it runs: their lock TTL
// (for a manual run), pause_after_failures, and definition hashes (drift).
func setAgentSchedules(ag *agent.Agent, cfg *config.Config, schedules []scheduler.Schedule) {
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
			TTL:                scheduler.LockTTL(exp, s.Jitter, margin, 0),
			PauseAfterFailures: s.PauseAfterFailures,
		}
	}
	hashes := ops.ScheduleHashes(schedules, time.Now())
	ag.SetSchedules(defs, hashes, ops.ConfigHash(hashes))
}

func closeLocker(l locking.Locker, logger *slog.Logger) {
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		logger.Error("closing the lock backend", "err", err)
	}
}

// reload applies a re-read config. An invalid file keeps the running one;
// the lock backend, node id and listen address need a restart (a backend
// swap under running jobs would drop their locks), so those changes are
// logged and not applied.
// started is the config the process started with: what is compared
// against is what is actually running, however many reloads came between.
func reload(path string, started *config.Config, o overrides, sched *scheduler.Scheduler, opsSvc *ops.Service,
	ag *agent.Agent, m *metrics.Metrics, n *notify.Notifier, logger *slog.Logger) {
	next, err := config.Load(path)
	if err != nil {
		logger.Error("SIGHUP: config is invalid; keeping the running one", "err", err.Error())
		return
	}
	o.apply(next)
	if !service.SameBackend(started, next) {
		logger.Warn("SIGHUP: [locking] backend settings changed; they apply at the next restart")
	}
	if next.NodeID != started.NodeID || next.HTTP.Listen != started.HTTP.Listen {
		logger.Warn("SIGHUP: node_id and [http] listen changes apply at the next restart")
	}
	for _, s := range next.Scheduled {
		m.AddSchedule(s.ID)
	}
	schedules := service.Schedules(next, logger)
	if err := sched.Reload(schedules); err != nil {
		logger.Error("SIGHUP: new schedules rejected; keeping the running ones", "err", err)
		return
	}
	opsSvc.SetSchedules(schedules)
	if ag != nil {
		setAgentSchedules(ag, next, schedules)
	}
	if next.HTTP.Token != started.HTTP.Token || next.HTTP.ReadToken != started.HTTP.ReadToken {
		logger.Warn("SIGHUP: [http] token and read_token changes apply at the next restart")
	}
	applyNotify(next, n, m)
	if next.Notify != started.Notify {
		logger.Warn("SIGHUP: [notify] changes apply at the next restart")
	}
	logger.Info("SIGHUP: config reloaded", "schedules", len(next.Scheduled))
}
