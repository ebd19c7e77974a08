package lockertest

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// The cases about what callers hand in (arguments, handles, odd keys) and
// what they get back (handle accessors, optional List and Ping).

// Bad TryLock arguments are errors wrapping ErrInvalid, never panics.
func caseBadTryLock(s *suite) {
	a := s.locker()
	ok := s.key("ok")
	bad := []struct {
		name string
		key  string
		ttl  time.Duration
	}{
		{"empty key", "", longTTL},
		{"zero TTL", ok, 0},
		{"negative TTL", ok, -time.Second},
		{"TTL below MinTTL", ok, locking.MinTTL - time.Nanosecond},
		{"key over MaxKeyLen", strings.Repeat("k", locking.MaxKeyLen+1), longTTL},
		{"invalid UTF-8", ok + "/\xff\xfe", longTTL},
		{"control character", ok + "/a\nb", longTTL},
	}
	for _, c := range bad {
		var h *locking.Handle
		var err error
		s.noPanic("TryLock with "+c.name, func() { h, err = a.TryLock(s.ctx, c.key, c.ttl) })
		if h != nil {
			s.t.Errorf("TryLock with %s returned handle %v, want an error wrapping ErrInvalid", c.name, h)
			continue
		}
		if !errors.Is(err, locking.ErrInvalid) {
			s.t.Errorf("TryLock with %s = %v, want an error wrapping ErrInvalid", c.name, err)
		}
	}
	// None of them took the valid key by accident.
	h := s.mustLock(a, ok, longTTL, "locker A on the valid key")
	s.mustRelease(a, h, "locker A")
}

// Nil, zero and foreign handles are errors wrapping ErrInvalid, never
// panics, and leave the real holder's lock alone.
func caseBadHandles(s *suite) {
	a, b, c := s.locker(), s.locker(), s.locker()
	k := s.key("k")
	h := s.mustLock(a, k, longTTL, "locker A")
	handles := []struct {
		name string
		h    *locking.Handle
		l    locking.Locker
	}{
		{"nil handle", nil, a},
		{"zero handle", &locking.Handle{}, a},
		{"handle from another locker", h, b},
	}
	for _, bad := range handles {
		var err error
		s.noPanic("Renew with a "+bad.name, func() { err = bad.l.Renew(s.ctx, bad.h) })
		if !errors.Is(err, locking.ErrInvalid) {
			s.t.Errorf("Renew with a %s = %v, want an error wrapping ErrInvalid", bad.name, err)
		}
		s.noPanic("Release with a "+bad.name, func() { err = bad.l.Release(s.ctx, bad.h) })
		if !errors.Is(err, locking.ErrInvalid) {
			s.t.Errorf("Release with a %s = %v, want an error wrapping ErrInvalid", bad.name, err)
		}
	}
	s.mustContend(c, k, "locker C after B tried A's handle (A must still hold the key)")
	s.mustRenew(a, h, "locker A")
	s.mustRelease(a, h, "locker A")
}

// Long and non-ASCII keys work end to end, and keys that differ only in a
// trailing space or in case are distinct locks.
func caseOddKeys(s *suite) {
	a, b := s.locker(), s.locker()
	prefix := s.key("")
	keys := []struct{ name, key string }{
		{"1000-byte key", prefix + strings.Repeat("x", 1000-len(prefix))},
		{"MaxKeyLen key", prefix + strings.Repeat("y", locking.MaxKeyLen-len(prefix))},
		{"non-ASCII key", prefix + "ключ/日本/🔒"},
		{"same with a trailing space", prefix + "ключ/日本/🔒 "},
		{"upper-case lookalike", prefix + "КЛЮЧ/日本/🔒"},
		{"key with glob and brace characters", prefix + "a key: * ? [x] {slot}"},
	}
	// All held at once, so lookalikes must be distinct locks.
	handles := make([]*locking.Handle, len(keys))
	for i, k := range keys {
		handles[i] = s.mustLock(a, k.key, longTTL, "locker A, "+k.name)
		if got := handles[i].Key(); got != k.key {
			s.t.Errorf("%s: handle Key() = %q, want the key as given, %q", k.name, short(got), short(k.key))
		}
	}
	for i, k := range keys {
		s.mustContend(b, k.key, "locker B, "+k.name)
		s.mustRenew(a, handles[i], "locker A, "+k.name)
		s.mustRelease(a, handles[i], "locker A, "+k.name)
		hb := s.mustLock(b, k.key, longTTL, "locker B after A released, "+k.name)
		s.mustRelease(b, hb, "locker B, "+k.name)
	}
}

var tokenRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// The handle reports its key, fencing token, TTL and a fresh random token.
func caseHandle(s *suite) {
	a := s.locker()
	k := s.key("k")
	ttl := 42 * time.Second
	seen := map[string]bool{}
	for range 5 {
		h := s.mustLock(a, k, ttl, "locker A")
		if h.Key() != k {
			s.t.Errorf("Key() = %q, want %q", h.Key(), k)
		}
		if h.Fence() <= 0 {
			s.t.Errorf("Fence() = %d, want > 0", h.Fence())
		}
		if h.TTL() != ttl {
			s.t.Errorf("TTL() = %v, want %v", h.TTL(), ttl)
		}
		tok := h.Token()
		if !tokenRE.MatchString(tok) {
			s.t.Errorf("Token() = %q, want 32 lower-case hex digits (128 random bits)", tok)
		}
		if seen[tok] {
			s.t.Errorf("Token() %q repeated across acquisitions", tok)
		}
		seen[tok] = true
		if strings.Contains(h.String(), tok) {
			s.t.Errorf("String() = %q reveals the token", h.String())
		}
		s.mustRelease(a, h, "locker A")
	}
}

// lister is implemented by backends that can list held locks (for the
// `locks` command).
type lister interface {
	List(ctx context.Context) ([]locking.LockInfo, error)
}

// A backend that lists shows held locks with their fence, and not released ones.
func caseList(s *suite) {
	a := s.locker()
	l, ok := a.(lister)
	if !ok {
		s.t.Skipf("%T has no List method", a)
	}
	held, gone := s.key("held"), s.key("gone")
	h := s.mustLock(a, held, longTTL, "locker A")
	hg := s.mustLock(a, gone, longTTL, "locker A")
	s.mustRelease(a, hg, "locker A")
	infos, err := l.List(s.ctx)
	if err != nil {
		s.t.Fatalf("List = %v", err)
	}
	found := false
	for _, in := range infos {
		switch in.Key {
		case gone:
			s.t.Errorf("List shows released key %q", gone)
		case held:
			found = true
			if in.Fence != h.Fence() {
				s.t.Errorf("List: fence of %q = %d, want the handle's %d", held, in.Fence, h.Fence())
			}
			if s.b.TTLExpiry && (in.TTLLeft <= 0 || in.TTLLeft > longTTL) {
				s.t.Errorf("List: TTLLeft of %q = %v, want in (0, %v]", held, in.TTLLeft, longTTL)
			}
		}
	}
	if !found {
		s.t.Errorf("List = %v, want it to include held key %q", infos, held)
	}
	s.mustRelease(a, h, "locker A")
}

// A backend that pings answers nil while it is open.
func casePing(s *suite) {
	a := s.locker()
	p, ok := a.(locking.Pinger)
	if !ok {
		s.t.Skipf("%T does not implement locking.Pinger", a)
	}
	if err := p.Ping(s.ctx); err != nil {
		s.t.Fatalf("Ping on an open locker = %v, want nil", err)
	}
}
