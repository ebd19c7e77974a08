// Package rendezvous ranks the live nodes for a tick by rendezvous
// (highest-random-weight) hashing on the schedule id and the tick time:
// every node that knows the same live nodes computes the same order, and
// a node joining or leaving moves only the ticks it wins or won. The
// scheduler's handoff (scheduler/handoff.go) asks the preferred node
// first; the agent builds a Peers from the node registry.
package rendezvous

import (
	"encoding/binary"
	"hash/fnv"
	"time"
)

// Peers is a fixed set of live nodes seen from one of them: a Preferrer by
// rendezvous hashing. Build it with New whenever the registry
// changes; it is read-only and safe for concurrent use.
type Peers struct {
	self  uint64   // hash of this node's id
	peers []uint64 // hashes of the other nodes' ids, without duplicates
	ids   []string // the other nodes' ids, in the order of peers
}

// New returns self's view of the live nodes (self may or may not be
// among nodes; it always counts).
func New(self string, nodes []string) *Peers {
	p := &Peers{self: nodeHash(self)}
	seen := map[string]bool{self: true}
	for _, n := range nodes {
		if seen[n] {
			continue
		}
		seen[n] = true
		p.peers = append(p.peers, nodeHash(n))
		p.ids = append(p.ids, n)
	}
	return p
}

// Len is the number of live nodes, self included.
func (p *Peers) Len() int { return len(p.peers) + 1 }

// Rank is rendezvous hashing: each node's weight for (id, T) is a mix of
// its id's hash and the tick's; rank is how many nodes weigh more than
// self. Equal weights (hash collisions of distinct ids, vanishingly rare)
// break by id hash, so every node still computes one order.
func (p *Peers) Rank(id string, tick time.Time) (rank, n int) {
	if p == nil {
		return 0, 1
	}
	k := tickHash(id, tick)
	mine := mix64(p.self ^ k)
	for _, h := range p.peers {
		w := mix64(h ^ k)
		if w > mine || (w == mine && h > p.self) {
			rank++
		}
	}
	return rank, len(p.peers) + 1
}

// Preferred is the node that nodes (the whole registry) prefer for tick
// T of schedule id: the one whose rank is 0.
func Preferred(id string, nodes []string, tick time.Time) string {
	for _, n := range nodes {
		if r, _ := New(n, nodes).Rank(id, tick); r == 0 {
			return n
		}
	}
	return ""
}

// nodeHash and tickHash are FNV-1a: stable across processes, versions and
// platforms (every node must compute the same order), unlike Go's map
// hash, which is seeded per process.
func nodeHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

func tickHash(id string, tick time.Time) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	var b [9]byte // a separator byte no id contains, then T in µs
	binary.BigEndian.PutUint64(b[1:], uint64(tick.UnixMicro()))
	h.Write(b[:])
	return h.Sum64()
}

// mix64 is the SplitMix64 finaliser: FNV alone spreads small input
// differences poorly over the high bits that decide a comparison.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
