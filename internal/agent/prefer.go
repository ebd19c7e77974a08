package agent

import (
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/rendezvous"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// liveNodes is one reading of the node registry.
type liveNodes struct {
	peers *rendezvous.Peers
	at    time.Time // when it was read (Options.Now)
	// ids holds the live nodes' ids, each with its announced start
	// (rerun.go: a node that restarted since a run began lost that run).
	ids map[string]time.Time
}

// setLive keeps the live nodes the announce just read: the registry the
// scheduler ranks this node in for each tick (Preferrer).
func (a *Agent) setLive(nodes []cluster.Node) {
	ids := make([]string, len(nodes))
	set := make(map[string]time.Time, len(nodes))
	for i, n := range nodes {
		ids[i] = n.NodeID
		set[n.NodeID] = n.StartedAt
	}
	a.live.Store(&liveNodes{peers: rendezvous.New(a.opts.NodeID, ids), at: a.opts.Now(), ids: set})
}

// Preferrer returns the agent as the scheduler's scheduler.Preferrer: it
// ranks this node for a tick among the live nodes of the last announce
// (every AnnounceEvery). A registry never read, or not read for as long as
// an announcement lives (the backend unreachable meanwhile), ranks this
// node first of one: it asks at once, as without handoff, rather than defer
// to nodes that may all be gone.
func (a *Agent) Preferrer() scheduler.Preferrer { return preferrer{a} }

type preferrer struct{ a *Agent }

func (p preferrer) Rank(id string, tick time.Time) (rank, n int) {
	l := p.a.live.Load()
	if l == nil || p.a.opts.Now().Sub(l.at) > 3*p.a.opts.AnnounceEvery {
		return 0, 1
	}
	return l.peers.Rank(id, tick)
}
