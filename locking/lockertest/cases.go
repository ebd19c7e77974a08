package lockertest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// cases is the suite, in the order the contract reads.
var cases = []testCase{
	{"TryLock/FreeKeyHeldThenContended", caseContention},
	{"Release/FreesKeyOnce", caseRelease},
	{"Renew/KeepsLockPastTTL", caseRenew},
	{"Renew/AfterRelease", caseRenewAfterRelease},
	{"TTL/Lapse", caseTTL},
	{"StaleHandle/CannotTouchNewHolder", caseStaleHandle},
	{"Fence/StrictlyIncreases", caseFence},
	{"Race/SeparateLockers", func(s *suite) { caseRace(s, false) }},
	{"Race/SharedLocker", func(s *suite) { caseRace(s, true) }},
	{"ManyKeys", caseManyKeys},
	{"Context/Cancelled", caseCancelled},
	{"Close/ReleasesAndRefuses", caseClose},
	{"BadInput/TryLock", caseBadTryLock},
	{"BadInput/Handles", caseBadHandles},
	{"Keys/LongAndNonASCII", caseOddKeys},
	{"Handle/Accessors", caseHandle},
	{"Optional/List", caseList},
	{"Optional/Ping", casePing},
}

// A free key is taken; the same key is then contended for the same locker
// and for another node, without an error; other keys are unaffected.
func caseContention(s *suite) {
	a, b := s.locker(), s.locker()
	k, other := s.key("k"), s.key("other")
	h := s.mustLock(a, k, longTTL, "locker A")
	s.mustContend(a, k, "locker A again (same locker)")
	s.mustContend(b, k, "locker B")
	ho := s.mustLock(b, other, longTTL, "locker B on another key")
	s.mustRelease(a, h, "locker A")
	s.mustRelease(b, ho, "locker B")
}

// Release frees the key for another node; releasing twice is ErrLockLost.
func caseRelease(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	h := s.mustLock(a, k, longTTL, "locker A")
	s.mustRelease(a, h, "locker A")
	hb := s.mustLock(b, k, longTTL, "locker B after A released")
	s.wantErrIs(a.Release(s.ctx, h), locking.ErrLockLost, "locker A: second Release of the same handle")
	s.mustContend(a, k, "locker A after its second Release (B must still hold the key)")
	s.mustRelease(b, hb, "locker B")
}

// Renewal keeps a lock past its original TTL; after Expire, Renew fails.
func caseRenew(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	ttl := s.ttl()
	h := s.mustLock(a, k, ttl, "locker A")
	// Two steps of 2/3 TTL each with a renewal between: past the original
	// TTL, inside the renewed one.
	step := ttl * 2 / 3
	s.passTime(step)
	s.mustRenew(a, h, "locker A before its TTL ran out")
	s.passTime(step)
	s.mustContend(b, k, "locker B after the original TTL, before the renewed one")
	s.mustRenew(a, h, "locker A again")

	if s.b.TTLExpiry && s.b.Advance != nil {
		// The renewed lease ends in its turn.
		s.passTime(ttl + time.Millisecond)
		hb := s.mustLock(b, k, longTTL, "locker B after the renewed TTL ran out")
		if err := a.Renew(s.ctx, h); err == nil {
			s.t.Fatal("locker A: Renew after its lease ran out and B took the key = nil, want an error")
		}
		s.mustRelease(b, hb, "locker B")
		h = s.mustLock(a, k, longTTL, "locker A again")
	}

	s.b.Expire(s.t, k)
	if err := a.Renew(s.ctx, h); err == nil {
		s.t.Fatal("locker A: Renew after Expire = nil, want an error: the lock has lapsed")
	}
	hb := s.mustLock(b, k, longTTL, "locker B after A's lock expired and its renewal failed")
	s.mustRelease(b, hb, "locker B")
}

// Renew of a released handle fails with ErrLockLost and takes nothing.
func caseRenewAfterRelease(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	h := s.mustLock(a, k, longTTL, "locker A")
	s.mustRelease(a, h, "locker A")
	s.wantErrIs(a.Renew(s.ctx, h), locking.ErrLockLost, "locker A: Renew after Release")
	hb := s.mustLock(b, k, longTTL, "locker B (A's failed renewal must not have re-taken the key)")
	s.mustRelease(b, hb, "locker B")
}

// With TTL expiry, a lock lapses by itself after its TTL and not before;
// without it, a lock outlives its TTL while its holder lives.
func caseTTL(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	ttl := s.ttl()
	if !s.b.TTLExpiry {
		if s.b.Advance == nil {
			ttl = 100 * time.Millisecond // nothing lapses; no need to wait long
		}
		h := s.mustLock(a, k, ttl, "locker A")
		s.passTime(ttl + realSlack)
		s.mustContend(b, k, "locker B after A's TTL passed (no TTL expiry: the lock lives with its holder)")
		s.mustRenew(a, h, "locker A after its TTL passed")
		s.mustRelease(a, h, "locker A")
		return
	}
	h := s.mustLock(a, k, ttl, "locker A")
	s.passTime(ttl / 3)
	s.mustContend(b, k, "locker B before A's TTL ran out")
	s.passTime(ttl - ttl/3 + realSlack)
	hb := s.mustLock(b, k, longTTL, "locker B after A's TTL ran out")
	s.wantErrIs(a.Release(s.ctx, h), locking.ErrLockLost, "locker A: Release after its lock lapsed and B took it")
	s.mustContend(a, k, "locker A after its failed Release (B must still hold the key)")
	s.mustRelease(b, hb, "locker B")
}

// A handle whose lock lapsed and was taken by another node can neither
// renew nor release the new holder's lock.
func caseStaleHandle(s *suite) {
	a, b, c := s.locker(), s.locker(), s.locker()
	k := s.key("k")
	stale := s.mustLock(a, k, longTTL, "locker A")
	s.b.Expire(s.t, k)
	fresh := s.mustLock(b, k, longTTL, "locker B after A's lock was expired")
	if err := a.Renew(s.ctx, stale); err == nil {
		s.t.Fatal("locker A: Renew of a stale handle = nil, want an error: B holds the key now")
	}
	if err := a.Release(s.ctx, stale); err == nil {
		s.t.Fatal("locker A: Release of a stale handle = nil, want an error: B holds the key now")
	}
	s.mustContend(c, k, "locker C after A's stale renew and release (B must still hold the key)")
	s.mustRenew(b, fresh, "locker B (the new holder)")
	s.mustRelease(b, fresh, "locker B (the new holder)")
	hc := s.mustLock(c, k, longTTL, "locker C after B released")
	s.mustRelease(c, hc, "locker C")
}

// Fencing tokens strictly increase with every acquisition of a key: across
// release, across expiry and across nodes.
func caseFence(s *suite) {
	a, b := s.locker(), s.locker()
	k := s.key("k")
	var last int64
	next := func(h *locking.Handle, how string) {
		s.t.Helper()
		if h.Fence() <= last {
			s.t.Fatalf("fence after %s = %d, want > %d (the previous acquisition's)", how, h.Fence(), last)
		}
		last = h.Fence()
	}
	h := s.mustLock(a, k, longTTL, "locker A")
	next(h, "the first acquisition")
	for range 3 {
		s.mustRelease(a, h, "locker A")
		h = s.mustLock(a, k, longTTL, "locker A")
		next(h, "release and re-acquire by the same locker")
		s.mustContend(b, k, "locker B while A holds the key")
		s.mustRelease(a, h, "locker A")
		h = s.mustLock(b, k, longTTL, "locker B")
		next(h, "release by A and acquire by B")
		s.b.Expire(s.t, k)
		h = s.mustLock(a, k, longTTL, "locker A after B's lock expired")
		next(h, "expiry of B's lock and acquire by A")
	}
	s.mustRelease(a, h, "locker A")
}

// raceN goroutines race for one key: exactly one wins, the rest see
// contention, nobody sees an error.
const raceN = 64

func caseRace(s *suite, shared bool) {
	k := s.key("k")
	lockers := make([]locking.Locker, raceN)
	for i := range lockers {
		if shared && i > 0 {
			lockers[i] = lockers[0]
			continue
		}
		lockers[i] = s.locker()
	}
	type result struct {
		h   *locking.Handle
		err error
	}
	results := make([]result, raceN)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range raceN {
		wg.Go(func() {
			<-start
			h, err := lockers[i].TryLock(s.ctx, k, longTTL)
			results[i] = result{h, err}
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, r := range results {
		switch {
		case r.err != nil:
			s.t.Errorf("goroutine %d: TryLock = error %v, want a handle or (nil, nil)", i, r.err)
		case r.h == nil:
		case winner >= 0:
			s.t.Errorf("goroutines %d and %d both got a handle for %q: two holders at once", winner, i, k)
		default:
			winner = i
		}
	}
	if s.t.Failed() {
		return
	}
	if winner < 0 {
		s.t.Fatalf("none of %d goroutines got the free key %q", raceN, k)
	}
	s.mustRelease(lockers[winner], results[winner].h, "the winner")
}

// A locker holds many distinct keys at once and releases them all; past
// Backend.MaxHeld it answers with an error, never with contention.
func caseManyKeys(s *suite) {
	const most = 10000
	n := most
	if s.b.MaxHeld > 0 && s.b.MaxHeld < n {
		n = s.b.MaxHeld
	}
	a := s.locker()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = s.key("many/" + itoa(i))
	}
	handles := make([]*locking.Handle, n)
	s.parallel(n, "TryLock", func(i int) error {
		h, err := a.TryLock(s.ctx, keys[i], longTTL)
		if err == nil && h == nil {
			return errors.New("(nil, nil) contended on a key no one else holds")
		}
		handles[i] = h
		return err
	})
	if s.b.MaxHeld > 0 && s.b.MaxHeld <= most {
		extra := s.key("many/one-too-many")
		var h *locking.Handle
		var err error
		s.noPanic("TryLock beyond MaxHeld", func() { h, err = a.TryLock(s.ctx, extra, longTTL) })
		switch {
		case h != nil:
			s.t.Errorf("TryLock of key %d with MaxHeld=%d returned a handle, want an error", n+1, s.b.MaxHeld)
			_ = a.Release(s.ctx, h)
		case err == nil:
			s.t.Errorf("TryLock of key %d with MaxHeld=%d = (nil, nil) contended, want an error: the key is free, the locker is full", n+1, s.b.MaxHeld)
		default:
			s.t.Logf("beyond MaxHeld: %v", err)
		}
	}
	s.parallel(n, "Release", func(i int) error { return a.Release(s.ctx, handles[i]) })
	// The keys are free again for another node.
	b := s.locker()
	for i := 0; i < n; i += max(1, n/10) {
		h := s.mustLock(b, keys[i], longTTL, "locker B on a released key")
		s.mustRelease(b, h, "locker B")
	}
}

// parallel runs op(0..n-1) on a few goroutines and fails the case with the
// first errors, naming the index.
func (s *suite) parallel(n int, what string, op func(i int) error) {
	s.t.Helper()
	const workers = 32 // enough to hide a networked backend's round trips
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
	)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := op(i); err != nil {
					mu.Lock()
					if failed < 5 {
						s.t.Errorf("%s of key %d of %d: %v", what, i, n, err)
					}
					failed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if failed > 0 {
		s.t.Fatalf("%s failed for %d of %d keys", what, failed, n)
	}
}

// A cancelled context is honoured by every operation, and a cancelled
// TryLock leaves no lock behind.
func caseCancelled(s *suite) {
	a, b := s.locker(), s.locker()
	k, held := s.key("k"), s.key("held")
	cancelled, cancel := context.WithCancel(s.ctx)
	cancel()

	h, err := a.TryLock(cancelled, k, longTTL)
	if h != nil {
		s.t.Fatalf("TryLock with a cancelled context returned handle %v, want an error", h)
	}
	s.wantErrIs(err, context.Canceled, "TryLock with a cancelled context")
	expired, cancel2 := context.WithDeadline(s.ctx, time.Now().Add(-time.Second))
	defer cancel2()
	h, err = a.TryLock(expired, k, longTTL)
	if h != nil {
		s.t.Fatalf("TryLock with an expired deadline returned handle %v, want an error", h)
	}
	s.wantErrIs(err, context.DeadlineExceeded, "TryLock with an expired deadline")
	hb := s.mustLock(b, k, longTTL, "locker B after A's cancelled TryLocks (they must leave no lock behind)")
	s.mustRelease(b, hb, "locker B")

	ha := s.mustLock(a, held, longTTL, "locker A")
	s.wantErrIs(a.Renew(cancelled, ha), context.Canceled, "Renew with a cancelled context")
	s.wantErrIs(a.Release(cancelled, ha), context.Canceled, "Release with a cancelled context")
	// Whatever the cancelled calls did, the holder can still let go and the
	// key ends up free.
	if err := a.Release(s.ctx, ha); err != nil && !errors.Is(err, locking.ErrLockLost) {
		s.t.Fatalf("Release with a live context after cancelled calls = %v, want nil or ErrLockLost", err)
	}
	hb = s.mustLock(b, held, longTTL, "locker B after A released")
	s.mustRelease(b, hb, "locker B")
}

// Close releases what the locker holds, refuses every later call with
// ErrClosed, and is safe to call twice; it leaves other nodes' locks alone.
func caseClose(s *suite) {
	a, b, c := s.locker(), s.locker(), s.locker()
	k1, k2, k3 := s.key("k1"), s.key("k2"), s.key("k3")
	h1 := s.mustLock(a, k1, longTTL, "locker A")
	s.mustLock(a, k2, longTTL, "locker A")
	hc := s.mustLock(c, k3, longTTL, "locker C")
	if err := a.Close(s.ctx); err != nil {
		s.t.Fatalf("Close = %v, want nil", err)
	}
	hb1 := s.mustLock(b, k1, longTTL, "locker B right after A closed")
	hb2 := s.mustLock(b, k2, longTTL, "locker B right after A closed")
	s.mustContend(b, k3, "locker B on C's key (A's Close must not release it)")

	_, err := a.TryLock(s.ctx, s.key("k4"), longTTL)
	s.wantErrIs(err, locking.ErrClosed, "TryLock after Close")
	s.wantErrIs(a.Renew(s.ctx, h1), locking.ErrClosed, "Renew after Close")
	s.wantErrIs(a.Release(s.ctx, h1), locking.ErrClosed, "Release after Close")
	if err := a.Close(s.ctx); err != nil {
		s.t.Fatalf("second Close = %v, want nil", err)
	}
	s.mustContend(c, k1, "locker C on B's key after A closed twice")
	s.mustRelease(b, hb1, "locker B")
	s.mustRelease(b, hb2, "locker B")
	s.mustRelease(c, hc, "locker C")
}

// itoa formats i with leading zeros so keys sort in order in listings.
func itoa(i int) string {
	const digits = 5
	b := make([]byte, digits)
	for j := digits - 1; j >= 0; j-- {
		b[j] = byte('0' + i%10)
		i /= 10
	}
	return string(b)
}
