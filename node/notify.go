package node

// The notifier's wiring: the dead-man's switch pings, the failure streak
// webhook and the min_runtime anomalies.

import (
	"log/slog"
	"slices"
	"time"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/internal/redact"
	"github.com/bext-dev/bext-scheduler/internal/service"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/metrics"
	"github.com/bext-dev/bext-scheduler/notify"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// notifierObserver gives the notifier run starts, run records and skips
// (the missed event), for scheduler.Observers.
type notifierObserver struct {
	scheduler.NopObserver
	n *notify.Notifier
}

func (o notifierObserver) RunRecorded(r scheduler.RunRecord) { o.n.RunRecorded(r) }
func (o notifierObserver) RunStarted(r scheduler.RunStart)   { o.n.RunStarted(r) }
func (o notifierObserver) TickSkipped(id string, tick time.Time, why scheduler.SkipReason) {
	o.n.TickSkipped(id, tick, why)
}

// newNotifier builds the node's notifier from the config. The lock
// backend, when it keeps the cluster's run history, tells whether a run
// starts or ends a failure streak cluster-wide.
func newNotifier(cfg *config.Config, backend locking.Locker, m *metrics.Metrics, logger *slog.Logger) *notify.Notifier {
	opts := notify.Options{
		OnDrop:  m.NotifyDropped,
		NodeID:  cfg.NodeID,
		URL:     cfg.Notify.URL,
		Events:  cfg.Notify.EventsOrDefault(),
		Timeout: cfg.Notify.Timeout.Duration,
		Pings:   pingURLs(cfg),
		Mask:    service.Masker(cfg),
		Logger:  logger,
	}
	if h, ok := backend.(notify.History); ok {
		opts.History = h
	}
	if cfg.Notify.URL != "" {
		logger.Info("notifications enabled", "url", redact.URL(cfg.Notify.URL), "events", opts.Events,
			"cluster_history", opts.History != nil)
	}
	return notify.New(opts)
}

// applyNotify gives the running notifier and metrics a (re)loaded
// config's ping URLs, notify URLs and min_runtimes.
func applyNotify(cfg *config.Config, n *notify.Notifier, m *metrics.Metrics) {
	n.SetPings(pingURLs(cfg))
	n.SetSchedules(notifySchedules(cfg, n.Sends(notify.EventOverrun)))
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

// notifySchedules is what the notifier keeps per schedule: only what it
// may use (a fleet of 100,000 schedules has no notify_url and no
// min_runtime, and expected_runtime is only shown by overrun events).
func notifySchedules(cfg *config.Config, overrun bool) map[string]notify.Schedule {
	out := map[string]notify.Schedule{}
	for _, s := range cfg.Scheduled {
		if s.NotifyURL == "" && s.MinRuntime.Duration == 0 && !overrun {
			continue
		}
		sc := notify.Schedule{NotifyURL: s.NotifyURL, MinRuntime: s.MinRuntime.Duration}
		if overrun {
			sc.ExpectedRuntime = s.ExpectedRuntime.Duration
		}
		out[s.ID] = sc
	}
	return out
}

// sameNotify says whether two [notify] tables send the same: a change
// applies at the next restart.
func sameNotify(a, b config.Notify) bool {
	return a.URL == b.URL && a.Timeout == b.Timeout && slices.Equal(a.EventsOrDefault(), b.EventsOrDefault())
}
