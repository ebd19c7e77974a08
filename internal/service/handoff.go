package service

import (
	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Preferrers supply the node registry the handoff ranks this node in
// (internal/agent's Agent).
type Preferrers interface {
	Preferrer() scheduler.Preferrer
}

// Handoff sets the scheduler options of the handoff (scheduler/handoff.go)
// from [cluster] handoff_delay: the agent's registry as the Preferrer, and
// the backend itself as the watcher of raised marks (opts.Locker may be an
// instrumented wrapper that hides it). It leaves the handoff off with no
// distributed backend (one node), no agent, or handoff_delay = "0s".
// Changing it takes a restart.
func Handoff(opts *scheduler.Options, cfg *config.Config, b Backend, agent Preferrers) {
	d := cfg.Cluster.Handoff(cfg.Locking.MaxClockSkew.Duration)
	if d <= 0 || b.Kind != hints.Distributed || agent == nil {
		return
	}
	opts.Preferrer, opts.HandoffDelay = agent.Preferrer(), d
	if w, ok := b.Locker.(locking.TickWatcher); ok {
		opts.Watcher = w
	}
}
