package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/internal/service"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/node"
)

func newRunCmd() *cobra.Command {
	var path, nodeID, listen string
	var tags []string
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
			for _, tag := range tags {
				if err := config.CheckTag(tag); err != nil {
					return usageErrorf("--tag: %v", err)
				}
			}
			o := overrides{nodeID: nodeID, listen: listen, tags: tags}
			o.apply(cfg)
			return serve(c.Context(), p, cfg, o, c.ErrOrStderr(), restoreGC)
		},
	}
	addConfigFlag(c, &path)
	c.Flags().StringVar(&nodeID, "node-id", "", "this node's id (default: node_id from the file, then the hostname)")
	c.Flags().StringArrayVar(&tags, "tag", nil, `a tag of this node, such as "role=db" (repeat for more; added to the file's tags): schedules with nodes run only where every tag they name is`)
	c.Flags().StringVar(&listen, "listen", "", `address for /metrics /healthz /readyz (default: [http] listen; "off" disables)`)
	return c
}

// overrides are the command-line flags that win over the file, kept so a
// SIGHUP reload applies them again.
type overrides struct {
	nodeID, listen string
	tags           []string
}

func (o overrides) apply(cfg *config.Config) {
	for _, tag := range o.tags {
		if !slices.Contains(cfg.Tags, tag) {
			cfg.Tags = append(cfg.Tags, tag)
		}
	}
	if o.nodeID != "" {
		cfg.NodeID = o.nodeID
	}
	if o.listen != "" {
		cfg.HTTP.Listen = o.listen
	}
}

func newLogger(w io.Writer, lc config.Log) *slog.Logger { return service.Logger(w, lc) }

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

// serve runs the node until SIGINT/SIGTERM (or ctx ends): the signals
// and the SIGHUP reload are the CLI's, the node is package node's.
// restoreGC ends startupGC's pace once the node is built.
func serve(parent context.Context, path string, cfg *config.Config, o overrides, stderr io.Writer, restoreGC func()) error {
	defer restoreGC() // on the early returns
	if parent == nil {
		parent = context.Background()
	}
	logger := newLogger(stderr, cfg.Log).With("node", cfg.NodeID)
	v, cm := buildVersion()
	n, err := node.New(parent, cfg, node.Options{Logger: logger, Version: v, Commit: cm, ReleaseSchedules: true})
	if err != nil {
		return withCode(exitUsage, err)
	}
	// Everything is built from the config's schedules, which New dropped:
	// give the memory that loading them took back to the system now,
	// before the node reports ready, rather than over the next minutes
	// (at 100,000 schedules the parse's garbage is several times what the
	// node keeps).
	restoreGC()
	debug.FreeOSMemory()

	ctx, stop := context.WithCancel(parent)
	defer stop()
	term := make(chan os.Signal, 2)
	signal.Notify(term, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(term)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	ran := make(chan struct{}) // closed when the node's Run has returned
	var wg sync.WaitGroup
	wg.Go(func() {
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
			n.EndGrace()
		case <-ran:
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload(path, o, n, logger)
			}
		}
	})
	runErr := n.Run(ctx)
	stop()
	close(ran)
	wg.Wait()
	if runErr != nil {
		return withCode(exitFailure, runErr)
	}
	return nil
}

func closeLocker(l locking.Locker, logger *slog.Logger) { service.CloseBackend(l, logger) }

// reload re-reads the config on SIGHUP and gives it to the node. An
// invalid file, or schedules the engine refuses, keep the running ones.
func reload(path string, o overrides, n *node.Node, logger *slog.Logger) {
	next, err := config.Load(path)
	if err != nil {
		logger.Error("SIGHUP: config is invalid; keeping the running one", "err", err.Error())
		return
	}
	o.apply(next)
	if err := n.Reload(next); err != nil {
		logger.Error("SIGHUP: new schedules rejected; keeping the running ones", "err", err)
		return
	}
	logger.Info("SIGHUP: config reloaded", "schedules", len(next.Scheduled))
}
