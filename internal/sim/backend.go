package sim

import (
	"context"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The backend the nodes of a cluster share, as the harness sees it: the
// memory backend on the fake clock (TestSim), or Redis or Postgres in real
// time (realtime.go). Each node life reaches it through a client of its
// own (a memory Peer, a Redis or Postgres Locker of its own, as separate
// processes would have), wrapped by the life's link; the harness itself
// pauses and resumes schedules on it as an operator would.

// nodeLocker is one node life's client of the backend: what a link calls.
type nodeLocker interface {
	TryLockTick(ctx context.Context, r locking.TickRequest) (locking.TickAnswer, error)
	TryLockTicks(ctx context.Context, reqs []locking.TickRequest) ([]locking.TickAnswer, []error)
	InitMarks(ctx context.Context, keys []string) error
	TryLock(ctx context.Context, key string, ttl time.Duration) (*locking.Handle, error)
	Renew(ctx context.Context, h *locking.Handle) error
	Release(ctx context.Context, h *locking.Handle) error
	ReleaseAll(ctx context.Context, hs []*locking.Handle) []error
	locking.Pauser
}

// backend is the shared backend: the operator's pauses go through it
// (cluster.operate), and peer gives node life k of node its own client.
type backend interface {
	locking.Pauser
	peer(node string, life int) nodeLocker
}

// A crasher is a node client that must be told its process died, beyond
// the cut link: a Postgres session ends with its process, and with it its
// advisory locks (realtime.go). The memory and Redis backends keep a
// crashed holder's lock for its TTL, and their clients need no telling.
type crasher interface{ crash() }

// A stateLoser is a backend the harness can make lose state (loss.go), as
// a store restarted without persistence does: the memory backend.
type stateLoser interface {
	DropLocks()
	ForgetMarks(keys ...string)
	RewindMarks(back time.Duration, keys ...string)
	ForgetFences()
}

// memBackend is the memory backend: every node life a Peer of one table.
type memBackend struct{ *memory.Locker }

func (m memBackend) peer(node string, _ int) nodeLocker { return m.Peer(node) }

var (
	_ nodeLocker = (*memory.Locker)(nil)
	_ backend    = memBackend{}
	_ stateLoser = memBackend{}
)

// boundedLink is the link of a node whose backend bounds its leases
// (locking.LeaseBounder: Postgres), telling the scheduler that bound as
// the backend itself would.
type boundedLink struct {
	*link
	locking.LeaseBounder
}

// locker is what the node's scheduler is given: the link, with its
// backend's lease bound when it has one.
func (l *link) locker() scheduler.Locker {
	if b, ok := l.mem.(locking.LeaseBounder); ok {
		return boundedLink{l, b}
	}
	return l
}
