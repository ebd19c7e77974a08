// Package lockertest is the conformance suite every lock backend passes, so
// that "satisfies the locking contract" means the same thing for memory,
// Redis and Postgres. A backend's tests call Run with a Backend describing
// how to build lockers and what the backend can and cannot do; the suite
// never skips a case silently: a capability a backend lacks is declared in
// Backend and the suite then asserts the declared behaviour instead.
//
// Benchmark measures the try-lock/release round trip the scheduler makes on
// every locked tick, with the same Backend-agnostic constructor.
package lockertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Backend describes a backend under test.
type Backend struct {
	// New returns a fresh Locker. Lockers made by calls within one test
	// share one namespace, like nodes of one cluster; lockers of different
	// tests never see each other's keys. The suite closes what it makes
	// (register extra cleanup with t.Cleanup).
	New func(t testing.TB) locking.Locker

	// Expire makes the current lock on key (taken through a Locker made by
	// New in this test) lapse the way it does on this backend: its TTL ran
	// out (memory, Redis) or its session died (Postgres). Required.
	// It may lapse other locks of the same test too (a fake clock moved past
	// every TTL): the suite never relies on other locks surviving Expire.
	Expire func(t testing.TB, key string)

	// TTLExpiry is true when locks end by themselves after their TTL
	// (memory, Redis). When false (Postgres advisory locks end with their
	// session), the suite asserts instead that a lock outlives its TTL while
	// its holder lives.
	TTLExpiry bool

	// Advance, when set, moves the backend's clock forward by d (memory's
	// injected clock). When nil and TTLExpiry is true, the suite lets real
	// time pass with short TTLs for the cases that are about time itself.
	Advance func(d time.Duration)

	// MaxHeld is how many locks one Locker can hold at once; 0 means no
	// limit (every backend in this repository). The suite holds min(MaxHeld, 10000)
	// distinct keys, and beyond MaxHeld expects a clear error, not contention.
	MaxHeld int

	// Now reads the backend's clock, the one try-lock-tick decides on
	// (Redis TIME, Postgres clock_timestamp(), memory's injected clock).
	// The tick cases place their ticks relative to it, and check fences
	// against it in microseconds. nil means time.Now (a backend on this
	// machine's clock).
	Now func() time.Time

	// ForgetMark deletes the tick mark of key (a TryLockTick key of this
	// test) the way a store that lost data would: Redis DEL of the mark
	// key, Postgres DELETE of the mark row, memory a test hook. It must
	// leave locks, fences and pause flags alone. Required by the cases about
	// a missing mark and Floor, which fail without it.
	ForgetMark func(t testing.TB, key string)

	// LoseReply does to the lock on lockKey (taken by a TryLockTick of
	// this test) what a lost reply leaves behind on this backend, when that
	// is more than the reply itself: Postgres drops the session whose reply
	// went missing, and the lock with it, while the grant stays recorded
	// in the schedule's row. nil: a lost reply leaves the lock held under
	// its token until its TTL (memory, Redis). The cases about resent
	// calls then resend from another Locker, which never heard of the
	// grant.
	LoseReply func(t testing.TB, lockKey string)

	// EndLease makes the lease of r's grant (a granted TryLockTick of this
	// test) end d from now, as if it had been granted r.TTL-d ago: memory
	// and Redis shorten the lock's TTL; Postgres, whose locks have no TTL,
	// moves the until of the grant's tick_grants entry, which bounds how
	// long a resend is answered from the grant. Required by the cases about
	// a resend's lease, which fail without it.
	EndLease func(t testing.TB, r locking.TickRequest, d time.Duration)

	// Parallel runs the cases at once (t.Parallel): for a backend whose
	// cases share nothing, the time, state and hooks above included, so
	// that the cases waiting on real time (a TTL, an expiry) wait together.
	// A backend on an injected clock that one case advances for all, as
	// memory's is, leaves it false.
	Parallel bool
}

// Run runs the whole conformance suite against b, each case as a subtest
// with its own lockers and keys.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if b.New == nil || b.Expire == nil {
		t.Fatal("lockertest: Backend.New and Backend.Expire are required")
	}
	all := append(append(cases[:len(cases):len(cases)], tickCases...), slotCases...)
	for _, c := range all {
		t.Run(c.name, func(t *testing.T) {
			if b.Parallel {
				t.Parallel()
			}
			c.run(newSuite(t, b))
		})
	}
}

// RunTicks runs only the try-lock-tick cases: for a second path to the
// same decision, such as a batch call answering one request at a time.
func RunTicks(t *testing.T, b Backend) {
	t.Helper()
	if b.New == nil || b.Expire == nil {
		t.Fatal("lockertest: Backend.New and Backend.Expire are required")
	}
	for _, c := range tickCases {
		t.Run(c.name, func(t *testing.T) {
			if b.Parallel {
				t.Parallel()
			}
			c.run(newSuite(t, b))
		})
	}
}

type testCase struct {
	name string
	run  func(s *suite)
}

// TTLs the suite uses. longTTL is for locks that must not lapse during a
// case however slow the machine is; the short ones are for the cases about
// time itself on a backend without an injected clock, and are long enough
// that a loaded CI machine still observes "not yet expired" reliably.
const (
	longTTL   = time.Minute
	shortTTL  = 3 * time.Second
	realSlack = 300 * time.Millisecond
)

// suite is one case's view of the backend: it makes lockers that are
// closed when the case ends and keys private to the case.
type suite struct {
	t   *testing.T
	b   Backend
	ctx context.Context
}

func newSuite(t *testing.T, b Backend) *suite {
	return &suite{t: t, b: b, ctx: t.Context()}
}

// locker returns a new Locker (a new node), closed when the case ends.
func (s *suite) locker() locking.Locker {
	s.t.Helper()
	l := s.b.New(s.t)
	if l == nil {
		s.t.Fatal("Backend.New returned a nil Locker")
	}
	s.t.Cleanup(func() {
		// A fresh context: the test's own is cancelled by the time cleanup runs.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Close(ctx); err != nil {
			s.t.Errorf("closing a locker at the end of the case (Close must be safe to call twice): %v", err)
		}
	})
	return l
}

// key returns a key unique to this case.
func (s *suite) key(name string) string {
	return "lockertest/" + s.t.Name() + "/" + name
}

// now reads the backend's clock (Backend.Now, else this machine's).
func (s *suite) now() time.Time {
	if s.b.Now != nil {
		return s.b.Now()
	}
	return time.Now()
}

// passTime moves time forward by d: the backend's clock when it has one,
// else real time (only for cases about time itself).
func (s *suite) passTime(d time.Duration) {
	if s.b.Advance != nil {
		s.b.Advance(d)
		return
	}
	time.Sleep(d)
}

// ttl picks the lease for a case about time: any length works with an
// injected clock; real time needs a short one.
func (s *suite) ttl() time.Duration {
	if s.b.Advance != nil {
		return 10 * time.Second
	}
	return shortTTL
}

// mustLock takes key on l or fails the case.
func (s *suite) mustLock(l locking.Locker, key string, ttl time.Duration, who string) *locking.Handle {
	s.t.Helper()
	h, err := l.TryLock(s.ctx, key, ttl)
	if err != nil {
		s.t.Fatalf("%s: TryLock(%q, %v) = error %v, want a handle", who, short(key), ttl, err)
	}
	if h == nil {
		s.t.Fatalf("%s: TryLock(%q, %v) = (nil, nil) contended, want a handle: the key should be free", who, short(key), ttl)
	}
	return h
}

// mustContend asserts that key is held elsewhere: (nil, nil) from l.
func (s *suite) mustContend(l locking.Locker, key, who string) {
	s.t.Helper()
	h, err := l.TryLock(s.ctx, key, longTTL)
	if err != nil {
		s.t.Fatalf("%s: TryLock(%q) on a held key = error %v, want (nil, nil): contention is not an error", who, short(key), err)
	}
	if h != nil {
		s.t.Fatalf("%s: TryLock(%q) on a held key returned handle %v, want (nil, nil): two holders at once", who, short(key), h)
	}
}

// mustRenew renews h or fails the case.
func (s *suite) mustRenew(l locking.Locker, h *locking.Handle, who string) {
	s.t.Helper()
	if err := l.Renew(s.ctx, h); err != nil {
		s.t.Fatalf("%s: Renew(%v) = %v, want nil: the holder still owns the lock", who, h, err)
	}
}

// mustRelease releases h or fails the case.
func (s *suite) mustRelease(l locking.Locker, h *locking.Handle, who string) {
	s.t.Helper()
	if err := l.Release(s.ctx, h); err != nil {
		s.t.Fatalf("%s: Release(%v) = %v, want nil: the holder still owns the lock", who, h, err)
	}
}

// wantErrIs fails the case unless err wraps target.
func (s *suite) wantErrIs(err, target error, what string) {
	s.t.Helper()
	if err == nil {
		s.t.Fatalf("%s = nil, want an error wrapping %q", what, target)
	}
	if !errors.Is(err, target) {
		s.t.Fatalf("%s = %v, want an error wrapping %q", what, err, target)
	}
}

// noPanic runs f and turns a panic into a test failure naming what.
func (s *suite) noPanic(what string, f func()) {
	s.t.Helper()
	defer func() {
		if r := recover(); r != nil {
			s.t.Fatalf("%s panicked: %v (bad input must be an error wrapping locking.ErrInvalid)", what, r)
		}
	}()
	f()
}

// short keeps long keys readable in failure messages.
func short(key string) string {
	if len(key) <= 80 {
		return key
	}
	return fmt.Sprintf("%s…(%d bytes)", strings.ToValidUTF8(key[:60], ""), len(key))
}
