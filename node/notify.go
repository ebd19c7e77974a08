package node

// The notifier's wiring: the dead-man's switch pings, the failure streak
// webhook and the min_runtime anomalies.

import (
	"log/slog"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/internal/redact"
	"github.com/bext-dev/bext-scheduler/internal/service"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/metrics"
	"github.com/bext-dev/bext-scheduler/notify"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// notifierObserver gives the notifier run starts and run records, for
// scheduler.Observers.
type notifierObserver struct {
	scheduler.NopObserver
	n *notify.Notifier
}

func (o notifierObserver) RunRecorded(r scheduler.RunRecord) { o.n.RunRecorded(r) }
func (o notifierObserver) RunStarted(r scheduler.RunStart)   { o.n.RunStarted(r) }

// newNotifier builds the node's notifier from the config. The lock
// backend, when it keeps the cluster's run history, tells whether a run
// starts or ends a failure streak cluster-wide.
func newNotifier(cfg *config.Config, backend locking.Locker, m *metrics.Metrics, logger *slog.Logger) *notify.Notifier {
	opts := notify.Options{
		OnDrop:  m.NotifyDropped,
		NodeID:  cfg.NodeID,
		URL:     cfg.Notify.URL,
		Timeout: cfg.Notify.Timeout.Duration,
		Pings:   pingURLs(cfg),
		Mask:    service.Masker(cfg),
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
