package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/internal/service"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/metrics"
	"github.com/bext-dev/bext-scheduler/notify"
	"github.com/bext-dev/bext-scheduler/scheduler"
	"github.com/bext-dev/bext-scheduler/server"
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
finish, cancel the rest, release every lock and exit 0. SIGHUP re-reads the
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
			p := configPath(path)
			cfg, err := loadConfig(c.ErrOrStderr(), p)
			if err != nil {
				return err
			}
			o := overrides{nodeID: nodeID, listen: listen}
			o.apply(cfg)
			return serve(c.Context(), p, cfg, o, c.ErrOrStderr())
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

// serve runs the node until SIGINT/SIGTERM (or ctx ends).
func serve(parent context.Context, path string, cfg *config.Config, o overrides, stderr io.Writer) error {
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
	m := metrics.New(reg, metrics.BuildInfo{Version: v, Commit: cm, GoVersion: runtime.Version()})
	var locker scheduler.Locker
	var closer locking.Locker
	if backend.Locker != nil {
		il := metrics.InstrumentLocker(backend.Locker, backend.Name, m)
		locker, closer = il, il
	}
	for _, s := range cfg.Scheduled {
		m.AddSchedule(s.ID)
	}
	notifier := newNotifier(cfg, backend.Locker, logger) // issue 19 (notify)
	applyNotify(cfg, notifier, m)                        // issue 19 (notify)
	schedOpts := scheduler.Options{
		NodeID:        cfg.NodeID,
		Locker:        locker,
		Backend:       backend.Kind,
		SafetyMargin:  cfg.Locking.SafetyMargin.Duration,
		MaxClockSkew:  cfg.Locking.MaxClockSkew.Duration,
		ShutdownGrace: cfg.ShutdownGrace.Duration,
		Clock:         clock,
		Observer:      observers{m, notifier}, // issue 19 (notify): was m
		Logger:        logger,
	}
	sched, err := scheduler.New(schedOpts, service.Schedules(cfg, logger))
	if err != nil {
		closeLocker(closer, logger)
		return withCode(exitUsage, fmt.Errorf("invalid config: %w", err))
	}

	var srv *server.Server
	if l := cfg.HTTP.Listen; l != "" && l != "off" {
		srv = server.New(l, reg, m.Ready, logger)
		if err := srv.Start(); err != nil {
			closeLocker(closer, logger)
			return withCode(exitFailure, err)
		}
		logger.Info("serving metrics and health", "addr", srv.Addr())
	}

	ctx, stop := signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	reloadDone := make(chan struct{})
	go func() { // owned by serve: ends when ctx does, and serve waits for it
		defer close(reloadDone)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload(path, cfg, o, sched, m, notifier, logger)
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
		"schedules", len(cfg.Scheduled), "backend", backendName)
	runErr := sched.Run(ctx)
	stop()
	<-reloadDone
	stopNotify() // issue 19 (notify)
	<-notifyDone // issue 19 (notify)

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
func reload(path string, started *config.Config, o overrides, sched *scheduler.Scheduler, m *metrics.Metrics, n *notify.Notifier, logger *slog.Logger) {
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
	if err := sched.Reload(service.Schedules(next, logger)); err != nil {
		logger.Error("SIGHUP: new schedules rejected; keeping the running ones", "err", err)
		return
	}
	applyNotify(next, n, m) // issue 19 (notify)
	if next.Notify != started.Notify {
		logger.Warn("SIGHUP: [notify] changes apply at the next restart")
	}
	logger.Info("SIGHUP: config reloaded", "schedules", len(next.Scheduled))
}
