package memory

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// numShards splits the table so that goroutines locking different keys
// rarely wait on the same mutex. A power of two, so a hash picks a shard
// with a mask. 64 shards cost a few kilobytes per table.
const numShards = 64

// minSweepLen is the shard size below which a shard never sweeps as a whole:
// tiny maps are cheaper to keep than to scan.
const minSweepLen = 64

// shrinkFrom is the size a shard map must have reached before a sweep that
// empties most of it rebuilds it: Go maps never give back memory on delete.
const shrinkFrom = 1024

// table is the lock table that one Locker and its peers share.
type table struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [numShards]shard
}

// shard is one mutex-guarded part of the table.
type shard struct {
	mu sync.Mutex
	m  map[string]*entry
	// fence is the last fencing token issued in this shard. A key always
	// hashes to the same shard, so its tokens strictly increase.
	fence int64
	// sweepAt is the map size at which the next whole-shard sweep runs:
	// twice the size left by the last one, so sweeping costs O(1) per
	// TryLock amortised.
	sweepAt int
	// Keeps shards on separate cache lines, so two cores working on two
	// shards do not invalidate each other's mutex.
	_ [64]byte
}

// entry is one acquisition of a key. Handles carry the *entry they created,
// so a handle owns the lock exactly while the table maps its key to that
// same entry: a re-acquisition (even by the same Locker) is a new entry.
type entry struct {
	owner   *Locker
	expires time.Time
	fence   int64
}

func newTable(now func() time.Time) *table {
	t := &table{now: now, seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].m = make(map[string]*entry)
		t.shards[i].sweepAt = minSweepLen
	}
	return t
}

func (t *table) shardFor(key string) *shard {
	return &t.shards[maphash.String(t.seed, key)&(numShards-1)]
}

// own reports whether e is still the live lock on key. An expired e is
// removed on the way, since its holder can no longer use it; anything else
// under key belongs to a newer holder and is left alone. Call with s.mu held.
func (s *shard) own(key string, e *entry, now time.Time) error {
	cur, ok := s.m[key]
	switch {
	case !ok || cur != e:
		return locking.ErrLockLost
	case !now.Before(e.expires):
		delete(s.m, key)
		return locking.ErrLockLost
	}
	return nil
}

// sweepIfGrown sweeps the shard when it has doubled since its last sweep.
// Call with s.mu held.
func (s *shard) sweepIfGrown(now time.Time) {
	if len(s.m) >= s.sweepAt {
		s.sweep(now)
	}
}

// sweep deletes every expired entry, and rebuilds a large map that it
// mostly emptied so the memory is given back. Call with s.mu held.
func (s *shard) sweep(now time.Time) {
	before := len(s.m)
	for k, e := range s.m {
		if !now.Before(e.expires) {
			delete(s.m, k)
		}
	}
	after := len(s.m)
	if before >= shrinkFrom && after < before/4 {
		m := make(map[string]*entry, after)
		for k, e := range s.m {
			m[k] = e
		}
		s.m = m
	}
	s.sweepAt = max(2*after, minSweepLen)
}

// len counts the entries in the table, expired or not (for tests).
func (t *table) len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
