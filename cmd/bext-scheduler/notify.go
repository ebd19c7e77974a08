package main

// Issue 19 wiring (notify): the dead-man's switch pings, the failure
// streak webhook and the min_runtime anomalies. Kept apart from run.go so
// the node's wiring there changes by a few marked lines only.

import (
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/internal/redact"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/metrics"
	"github.com/bext-dev/bext-scheduler/notify"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// observers fans the scheduler's reports out: everything to the metrics,
// run starts and run records to the notifier too.
type observers struct {
	*metrics.Metrics
	n *notify.Notifier
}

var (
	_ scheduler.Observer         = observers{}
	_ scheduler.ClockObserver    = observers{}
	_ scheduler.RunObserver      = observers{}
	_ scheduler.RunStartObserver = observers{}
)

// RunRecorded goes to both.
func (o observers) RunRecorded(r scheduler.RunRecord) {
	o.Metrics.RunRecorded(r)
	o.n.RunRecorded(r)
}

// RunStarted goes to the notifier.
func (o observers) RunStarted(r scheduler.RunStart) { o.n.RunStarted(r) }

// newNotifier builds the node's notifier from the config. The lock
// backend, when it keeps the cluster's run history, tells whether a run
// starts or ends a failure streak cluster-wide.
func newNotifier(cfg *config.Config, backend locking.Locker, logger *slog.Logger) *notify.Notifier {
	opts := notify.Options{
		NodeID:  cfg.NodeID,
		URL:     cfg.Notify.URL,
		Timeout: cfg.Notify.Timeout.Duration,
		Pings:   pingURLs(cfg),
		Mask:    secretMask(cfg),
		Logger:  logger,
	}
	if h, ok := backend.(notify.History); ok {
		opts.History = h
	}
	if cfg.Notify.URL != "" {
		logger.Info("failure notifications enabled", "url", redact.URL(cfg.Notify.URL), "cluster_history", opts.History != nil)
	}
	return notify.New(opts)
}

// applyNotify gives the running notifier and metrics a (re)loaded
// config's ping URLs and min_runtimes.
func applyNotify(cfg *config.Config, n *notify.Notifier, m *metrics.Metrics) {
	n.SetPings(pingURLs(cfg))
	for _, s := range cfg.Scheduled {
		m.SetMinRuntime(s.ID, s.MinRuntime.Duration)
	}
}

func pingURLs(cfg *config.Config) map[string]string {
	out := map[string]string{}
	for _, s := range cfg.Scheduled {
		if s.PingURL != "" {
			out[s.ID] = s.PingURL
		}
	}
	return out
}

// secretMask hides, in an error line, the values the config read from
// ${VAR}: they may be tokens a job echoed into its error.
func secretMask(cfg *config.Config) func(string) string {
	var values []string
	for _, s := range cfg.Scheduled {
		for _, name := range s.EnvMask {
			if v := os.Getenv(name); len(v) >= 4 && !slices.Contains(values, v) {
				values = append(values, v)
			}
		}
	}
	// Longest first, so a secret holding a shorter one is masked whole.
	slices.SortFunc(values, func(a, b string) int { return len(b) - len(a) })
	return func(s string) string {
		for _, v := range values {
			s = strings.ReplaceAll(s, v, redact.Mask)
		}
		return s
	}
}
