package memory

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/mutation"
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

// tokenLen is the size of a handle's token in bytes (128 bits), and
// tokensPerRead how many tokens one crypto/rand read supplies.
const (
	tokenLen      = 16
	tokensPerRead = 16
)

// table is the lock table that one Locker and its peers share.
type table struct {
	// elapsed reads the table's clock as the time since the table was made.
	// Expiries are kept as such offsets: comparing them is integer
	// arithmetic, and with the real clock one monotonic reading (time.Since)
	// costs half of time.Now, which reads the wall clock too.
	elapsed func() time.Duration
	// clock reads the table's clock as a time: the wall time that marks,
	// pauses and the floor of fences are in. epoch is its reading when the
	// table was made, so clock().Sub(epoch) is what elapsed returns.
	clock  func() time.Time
	epoch  time.Time
	seed   maphash.Seed
	shards [numShards]shard
	// nodes are the live announcements (cluster.Store), few and table-wide.
	nodes nodeTable
	// control is the operators' acts (control.go), few and table-wide.
	control controlTable
	// watches are the TickWatchers listening to raised marks (watch.go).
	watches watchers
}

// shard is one mutex-guarded part of the table.
type shard struct {
	mu sync.Mutex
	m  map[string]entry
	// marks and pauses are the tick marks and pause flags of the keys of
	// this shard (try-lock-tick). Unlike locks they are never swept: a mark
	// outlives every lock, and there is one per schedule, not per run.
	marks  map[string]time.Time
	pauses map[string]locking.Pause
	// The cluster state of the schedules of this shard (cluster.Store):
	// kept under the mutex of the schedule's lock, so TakeRequest takes a
	// request and the lock in one step, as try-lock-tick does with marks.
	clusterState
	// fence is the last fencing token issued in this shard. A key always
	// hashes to the same shard, so its tokens strictly increase.
	fence int64
	// grants are the records of the try-lock-tick grants of this shard's
	// lock keys whose request carried a Token, by lock key, each kept for
	// locking.GrantKeep after its grant or last extension, so that a
	// resend that comes after its lock's TTL ran out is still told what
	// became of its grant (locking.DecideLapsedResend). Nil until the
	// first record; swept when it has doubled (grantSweepAt).
	grants       map[string]*keyGrants
	grantSweepAt int
	// sweepAt is the map size at which the next whole-shard sweep runs:
	// twice the size left by the last one, so sweeping costs O(1) per
	// TryLock amortised.
	sweepAt int
	// random holds crypto/rand bytes for the next tokens, random[used:]
	// unused. One read per tokensPerRead tokens: a crypto/rand call costs
	// far more than the 16 bytes it returns, and TryLock is meant to stay
	// well under a microsecond.
	random [tokenLen * tokensPerRead]byte
	used   int
	hexed  string // random in hex, made by tokenString when first needed
	// Keeps shards on separate cache lines, so two cores working on two
	// shards do not invalidate each other's mutex.
	_ [64]byte
}

// entry is one acquisition of a key, stored by value (no allocation per
// lock). Its fencing token identifies it: fences are unique within a shard
// and a key never changes shard, so a handle owns the lock exactly while its
// key maps to an entry with the handle's fence. A re-acquisition, even by
// the same Locker, gets a new fence.
type entry struct {
	owner   *Locker
	expires time.Duration // on the table's elapsed clock
	fence   int64
	// token is the handle's token and tick the T of a try-lock-tick's grant
	// (µs; 0 for TryLock), so that a resent try-lock-tick carrying both is
	// answered from this lock.
	token string
	tick  int64
}

// keyGrants are the grant records of one lock key (shard.grants).
type keyGrants struct {
	// last is the fence of the key's last acquisition, whatever took it
	// (TryLock, TakeRequest, a grant): a record whose fence is not it was
	// followed by another acquisition, and its grant cannot be continued.
	last int64
	recs []grantRec
}

// grantRec is the record of one try-lock-tick grant, or of a verdict
// decided anew (decided set, fence 0): a resend's contended or done, or
// paused or missed for any request carrying a Token. A late copy of an
// earlier attempt of that request, or a resend after a lost reply, is
// answered the same, and takes nothing (locking.TickRequest.Resend).
type grantRec struct {
	token   string
	tick    int64               // T in µs
	fence   int64               // the fence it drew
	keep    time.Duration       // on the table's elapsed clock: kept until then
	decided locking.TickVerdict // 0: a grant's record
	// before is the first attempt's TickAnswer.Before (the stored mark its
	// step found; zero: none), answered again by a resend answered from
	// the record.
	before time.Time
}

// acquired tells key's grant records, if any, that key was acquired with
// fence. Call with s.mu held.
func (s *shard) acquired(key string, fence int64) {
	if len(s.grants) != 0 {
		if kg := s.grants[key]; kg != nil {
			kg.last = fence
		}
	}
}

// findGrant returns key's record of the grant of token for tick (µs) that
// is still kept at now, and its index. Call with s.mu held.
func (s *shard) findGrant(key, token string, tick int64, now time.Duration) (*keyGrants, int) {
	kg := s.grants[key]
	if kg == nil {
		return nil, -1
	}
	for i, g := range kg.recs {
		if g.token == token && g.tick == tick && now < g.keep {
			return kg, i
		}
	}
	return kg, -1
}

// keepGrant records key's grant g (or extends it: the same token and T),
// dropping key's records past their keep, and sweeps every key's once the
// map has doubled since the last sweep. Call with s.mu held.
func (s *shard) keepGrant(key string, g grantRec, now time.Duration) {
	if s.grants == nil {
		s.grants = make(map[string]*keyGrants)
	}
	kg := s.grants[key]
	if kg == nil {
		kg = &keyGrants{}
		s.grants[key] = kg
	}
	recs := kg.recs[:0]
	for _, o := range kg.recs {
		if now < o.keep && (o.token != g.token || o.tick != g.tick) {
			recs = append(recs, o)
		}
	}
	kg.recs = append(recs, g)
	if len(s.grants) < s.grantSweepAt {
		return
	}
	for k, kg := range s.grants {
		recs := kg.recs[:0]
		for _, o := range kg.recs {
			if now < o.keep {
				recs = append(recs, o)
			}
		}
		if kg.recs = recs; len(recs) == 0 {
			delete(s.grants, k)
		}
	}
	s.grantSweepAt = max(2*len(s.grants), minSweepLen)
}

// forgetGrant drops key's record of the grant of token with fence: it was
// released. Call with s.mu held.
func (s *shard) forgetGrant(key, token string, fence int64) {
	kg := s.grants[key]
	if kg == nil {
		return
	}
	kg.recs = slices.DeleteFunc(kg.recs, func(g grantRec) bool { return g.token == token && g.fence == fence })
	if len(kg.recs) == 0 {
		delete(s.grants, key)
	}
}

// newTable makes a table on the clock now; nil means the real clock.
func newTable(now func() time.Time) *table {
	var epoch time.Time
	var elapsed func() time.Duration
	if now == nil {
		now = time.Now
		epoch = time.Now()
		elapsed = func() time.Duration { return time.Since(epoch) }
	} else {
		epoch = now()
		elapsed = func() time.Duration { return now().Sub(epoch) }
	}
	t := &table{elapsed: elapsed, clock: now, epoch: epoch, seed: maphash.MakeSeed()}
	t.nodes.m = make(map[string]liveNode)
	for i := range t.shards {
		t.shards[i].m = make(map[string]entry)
		t.shards[i].marks = make(map[string]time.Time)
		t.shards[i].pauses = make(map[string]locking.Pause)
		t.shards[i].clusterState = newClusterState()
		t.shards[i].sweepAt = minSweepLen
		t.shards[i].used = len(t.shards[i].random) // empty: filled on first use
	}
	return t
}

// now reads the clock once: the time, and the time since the table was
// made (monotonic on the real clock, as elapsed).
func (t *table) now() (time.Time, time.Duration) {
	now := t.clock()
	return now, now.Sub(t.epoch)
}

func (t *table) shardIndex(key string) int {
	return int(maphash.String(t.seed, key) & (numShards - 1))
}

func (t *table) shardFor(key string) *shard {
	return &t.shards[t.shardIndex(key)]
}

// lockShards locks the shards of keys a and b, in index order so that two
// callers locking the same pair cannot deadlock; unlockShards unlocks
// them. try-lock-tick needs both when its lock (a per-tick key) and its
// mark (the schedule's key) live in different shards: one atomic step.
// (No unlock closure is returned: it was three allocations a tick.)
func (t *table) lockShards(a, b string) (sa, sb *shard) {
	i, j := t.shardIndex(a), t.shardIndex(b)
	sa, sb = &t.shards[i], &t.shards[j]
	switch {
	case i == j:
		sa.mu.Lock()
	case i > j:
		sb.mu.Lock()
		sa.mu.Lock()
	default:
		sa.mu.Lock()
		sb.mu.Lock()
	}
	return sa, sb
}

// unlockShards unlocks what lockShards locked.
func unlockShards(sa, sb *shard) {
	sa.mu.Unlock()
	if sb != sa {
		sb.mu.Unlock()
	}
}

// nextFence draws a fencing token from s: above the last one s issued and
// at least the clock in microseconds, so fences stay above those of an
// earlier process (a restart, a switch of backend and back) whatever it
// issued them on, as long as the clock was not stepped back. Call with
// s.mu held.
func (s *shard) nextFence(now time.Time) int64 {
	if mutation.On(mutation.NoFenceFloor) { // mutation (simmut tag only): the counter alone, no clock floor
		now = time.Time{}
	}
	s.fence = max(s.fence+1, now.UnixMicro())
	return s.fence
}

// own reports whether the acquisition of key with this fence is still the
// live lock on key. If it expired it is removed on the way, since its holder
// can no longer use it; anything else under key belongs to a newer holder
// and is left alone. Call with s.mu held.
func (s *shard) own(key string, fence int64, now time.Duration) (entry, error) {
	cur, ok := s.m[key]
	switch {
	case !ok || cur.fence != fence:
		return entry{}, locking.ErrLockLost
	case now >= cur.expires:
		delete(s.m, key)
		return entry{}, locking.ErrLockLost
	}
	return cur, nil
}

// token returns 128 fresh bits from crypto/rand, each byte handed out once.
// Call with s.mu held.
func (s *shard) token() ([tokenLen]byte, error) {
	var tok [tokenLen]byte
	if err := s.refillIfUsed(); err != nil {
		return tok, err
	}
	copy(tok[:], s.random[s.used:])
	s.used += tokenLen
	return tok, nil
}

// tokenString is token in hex, as a handle carries it: a slice of one
// string made per tokensPerRead tokens (hexed), not a string per token,
// which was one allocation of the few a try-lock-tick makes. A held lock
// keeps its token, and so the 512 bytes it is a slice of, until released.
// Call with s.mu held.
func (s *shard) tokenString() (string, error) {
	if err := s.refillIfUsed(); err != nil {
		return "", err
	}
	if s.hexed == "" {
		s.hexed = hex.EncodeToString(s.random[:])
	}
	tok := s.hexed[2*s.used : 2*(s.used+tokenLen)]
	s.used += tokenLen
	return tok, nil
}

// refillIfUsed reads fresh random bytes once every byte was handed out.
func (s *shard) refillIfUsed() error {
	if s.used < len(s.random) {
		return nil
	}
	if _, err := rand.Read(s.random[:]); err != nil {
		return fmt.Errorf("reading random token: %w", err)
	}
	s.used, s.hexed = 0, ""
	return nil
}

// sweepIfGrown sweeps the shard when it has doubled since its last sweep.
// Call with s.mu held.
func (s *shard) sweepIfGrown(now time.Duration) {
	if len(s.m) >= s.sweepAt {
		s.sweep(now)
	}
}

// sweep deletes every expired entry, and rebuilds a large map that it
// mostly emptied so the memory is given back. Call with s.mu held.
func (s *shard) sweep(now time.Duration) {
	before := len(s.m)
	for k, e := range s.m {
		if now >= e.expires {
			delete(s.m, k)
		}
	}
	after := len(s.m)
	if before >= shrinkFrom && after < before/4 {
		m := make(map[string]entry, after)
		for k, e := range s.m {
			m[k] = e
		}
		s.m = m
	}
	s.sweepAt = max(2*after, minSweepLen)
}

// expiry is now+ttl, saturated so a huge TTL means "never", not a time in
// the past.
func expiry(now, ttl time.Duration) time.Duration {
	if ttl > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + ttl
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
