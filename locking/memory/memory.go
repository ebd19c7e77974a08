// Package memory is the in-process lock backend: a lock table in this
// process's memory, guarded by mutexes.
//
// It locks only this process. Two bext-scheduler nodes each using memory
// locks exclude nothing from each other, so it is never a backend for
// multi-node traffic; it is the correct fallback for a single-node
// deployment and for development, where it gives the same contract (three
// answers from TryLock, TTLs, fencing tokens, stale handles refused) as the
// Redis and Postgres backends.
//
// Expiry is lazy: nothing runs in the background. An expired lock is
// replaced by the next TryLock on its key, and each shard of the table sweeps
// all its expired entries whenever it has doubled in size since its last
// sweep, so a dead holder never wedges a key and the table stays within a
// small factor of the number of live locks.
//
// Fencing tokens come from one counter per shard of the table. A key always
// lives in the same shard, so its tokens strictly increase across release
// and expiry (though not by one: other keys share the counter), and the
// memory this costs is fixed (no per-key history). Every token is also at
// least the clock in microseconds, as on every backend, so a restarted
// process (or a switch to another backend and back) still issues larger
// tokens than before, unless the clock was stepped back in between.
//
// Try-lock-tick (locking.TickLocker) keeps each key's tick mark and pause
// flag in the same table, so peers share them like nodes share a backend,
// and decides with locking.DecideTick under the shard's mutex: one atomic
// step. Marks and pause flags outlive locks and are never swept.
//
// Several Lockers can share one table (Peer): they exclude each other, and
// each releases only its own locks on Close.
//
// The Locker is also the cluster state (cluster.Store: run history, live
// nodes, manual run requests) of the Lockers sharing its table, kept in the
// same shards as the locks so that TakeRequest takes a request and the
// schedule's lock in one step.
package memory

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Locker is an in-process lock backend. It implements locking.Locker,
// locking.TickLocker, locking.Pauser, locking.Pinger and cluster.Store, and
// is safe for concurrent use.
type Locker struct {
	tab    *table
	holder string
	closed atomic.Bool
}

var (
	_ locking.Locker     = (*Locker)(nil)
	_ locking.Pinger     = (*Locker)(nil)
	_ locking.TickLocker = (*Locker)(nil)
	_ locking.Pauser     = (*Locker)(nil)
	// The batching contract (locking/batch.go): in process, so the
	// scheduler batches neither.
	_ locking.TickBatcher     = (*Locker)(nil)
	_ locking.ReleaseBatcher  = (*Locker)(nil)
	_ locking.InProcessLocker = (*Locker)(nil)
)

// Option configures New.
type Option func(*config)

type config struct {
	now    func() time.Time // nil: the real clock
	holder string
}

// WithClock makes the Locker read time from now instead of time.Now, so
// tests can expire locks by moving a fake clock instead of sleeping.
// A nil now means time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// WithHolder names the holder (node id, component) that List reports for
// locks this Locker holds. The default is "".
func WithHolder(holder string) Option {
	return func(c *config) { c.holder = holder }
}

// New returns a Locker with its own, empty lock table.
func New(opts ...Option) *Locker {
	var c config
	for _, o := range opts {
		o(&c)
	}
	return &Locker{tab: newTable(c.now), holder: c.holder}
}

// Peer returns a new Locker that shares l's lock table and clock but holds
// its own locks: the two exclude each other on every key, handles from one
// are refused by the other, and closing one releases only its own locks.
// It is how several components of one process (or the nodes of a
// conformance test) share a namespace. Peer works on a closed l.
func (l *Locker) Peer(holder string) *Locker {
	return &Locker{tab: l.tab, holder: holder}
}

// TryLock takes key for ttl if no one holds it. It returns (nil, nil) when
// another holder (this Locker included) has it and its TTL has not run out.
func (l *Locker) TryLock(ctx context.Context, key string, ttl time.Duration) (*locking.Handle, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("locking/memory: try-lock %q: %w", key, err)
	}
	if l.closed.Load() {
		return nil, fmt.Errorf("locking/memory: try-lock %q: %w", key, locking.ErrClosed)
	}
	if err := locking.CheckTryLock(key, ttl); err != nil {
		return nil, fmt.Errorf("locking/memory: try-lock: %w", err)
	}
	s := l.tab.shardFor(key)
	s.mu.Lock()
	// Checked again under the shard lock: Close marks the Locker closed
	// before it sweeps each shard under the same lock, so an entry is either
	// inserted before Close sweeps this shard (and removed by it) or never.
	if l.closed.Load() {
		s.mu.Unlock()
		return nil, fmt.Errorf("locking/memory: try-lock %q: %w", key, locking.ErrClosed)
	}
	wall, now := l.tab.now()
	if cur, ok := s.m[key]; ok && now < cur.expires {
		s.mu.Unlock()
		return nil, nil
	}
	tok, err := s.token()
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("locking/memory: try-lock %q: %w", key, err)
	}
	fence := s.nextFence(wall)
	// memory recognises an acquisition by its fence; the token serves the
	// caller (logs, job environment), proves the handle is fresh, and lets
	// a resent try-lock-tick find its lock.
	token := hex.EncodeToString(tok[:])
	s.m[key] = entry{owner: l, expires: expiry(now, ttl), fence: fence, token: token} // replaces an expired entry, if any
	s.acquired(key, fence)
	s.sweepIfGrown(now)
	s.mu.Unlock()
	return locking.NewHandle(l, key, token, fence, ttl, nil), nil
}

// Renew extends the lock by its TTL from now. It returns an error wrapping
// locking.ErrLockLost when the lock expired, was released, or is now held
// under another acquisition, which it leaves untouched.
func (l *Locker) Renew(ctx context.Context, h *locking.Handle) error {
	if err := l.check(ctx, "renew", h); err != nil {
		return err
	}
	s := l.tab.shardFor(h.Key())
	s.mu.Lock()
	defer s.mu.Unlock()
	now := l.tab.elapsed()
	e, err := s.own(h.Key(), h.Fence(), now)
	if err != nil {
		return fmt.Errorf("locking/memory: renew %v: %w", h, err)
	}
	e.expires = expiry(now, h.TTL())
	s.m[h.Key()] = e
	s.hearTake(h.Key(), h.Token()) // its taker heard: see requeueLapsed
	return nil
}

// Release gives the lock back. It returns an error wrapping
// locking.ErrLockLost when the handle no longer holds the lock (expired,
// released already, or re-acquired by another holder, which keeps it).
func (l *Locker) Release(ctx context.Context, h *locking.Handle) error {
	if err := l.check(ctx, "release", h); err != nil {
		return err
	}
	s := l.tab.shardFor(h.Key())
	s.mu.Lock()
	defer s.mu.Unlock()
	// A try-lock-tick's grant released is over, even when its lock lapsed
	// first: its holder ran T or gave it up, and a late resend of its
	// request must not take the lock again (locking.TickLocker).
	s.forgetGrant(h.Key(), h.Token(), h.Fence())
	if _, err := s.own(h.Key(), h.Fence(), l.tab.elapsed()); err != nil {
		// A take's lock that lapsed before its taker renewed it: the
		// taker never started the run (see requeueLapsed), and its trigger
		// goes back to the queue, so its record stays for that.
		return fmt.Errorf("locking/memory: release %v: %w", h, err)
	}
	// A take's lock released while live: its taker heard, and ran the
	// trigger or refused it.
	s.hearTake(h.Key(), h.Token())
	delete(s.m, h.Key())
	return nil
}

// ReleaseAll is Release for each handle in turn: errs[i] is its answer for
// hs[i]. The memory backend has no round trip to save; it implements the
// batch so that a scheduler on it takes the same path
// (locking.ReleaseBatcher) as on Redis.
func (l *Locker) ReleaseAll(ctx context.Context, hs []*locking.Handle) (errs []error) {
	errs = make([]error, len(hs))
	for i, h := range hs {
		errs[i] = l.Release(ctx, h)
	}
	return errs
}

// Close releases every lock this Locker holds; peers sharing its table keep
// theirs. Afterwards every method returns locking.ErrClosed. Closing twice
// is not an error. Close never blocks on I/O, so it ignores ctx: shutdown
// must release locks even when its context is already cancelled.
func (l *Locker) Close(ctx context.Context) error {
	if l.closed.Swap(true) {
		return nil
	}
	for i := range l.tab.shards {
		s := &l.tab.shards[i]
		s.mu.Lock()
		for k, e := range s.m {
			if e.owner == l {
				delete(s.m, k)
			}
		}
		s.mu.Unlock()
	}
	return nil
}

// Ping reports whether the Locker can be used: nil unless it is closed
// (an in-process table is always reachable).
func (l *Locker) Ping(ctx context.Context) error {
	if l.closed.Load() {
		return fmt.Errorf("locking/memory: ping: %w", locking.ErrClosed)
	}
	return nil
}

// List returns the unexpired locks in the table (this Locker's and its
// peers'), sorted by key, each with the time left on it and its holder's
// name (WithHolder). Expired entries it meets are swept.
func (l *Locker) List(ctx context.Context) ([]locking.LockInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("locking/memory: list: %w", err)
	}
	if l.closed.Load() {
		return nil, fmt.Errorf("locking/memory: list: %w", locking.ErrClosed)
	}
	var out []locking.LockInfo
	for i := range l.tab.shards {
		s := &l.tab.shards[i]
		s.mu.Lock()
		now := l.tab.elapsed()
		s.sweep(now)
		for k, e := range s.m {
			out = append(out, locking.LockInfo{
				Key:     k,
				Fence:   e.fence,
				TTLLeft: e.expires - now,
				Holder:  e.owner.holder,
			})
		}
		s.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b locking.LockInfo) int { return cmp.Compare(a.Key, b.Key) })
	return out, nil
}

// check does what Renew and Release share before touching the table:
// context, closed Locker, and a handle this Locker issued.
func (l *Locker) check(ctx context.Context, op string, h *locking.Handle) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("locking/memory: %s %v: %w", op, h, err)
	}
	if l.closed.Load() {
		return fmt.Errorf("locking/memory: %s %v: %w", op, h, locking.ErrClosed)
	}
	// The handle's fence names the acquisition; HandleState only proves the
	// handle is this Locker's (it carries no state).
	if _, err := locking.HandleState(h, l); err != nil {
		return fmt.Errorf("locking/memory: %s: %w", op, err)
	}
	return nil
}
