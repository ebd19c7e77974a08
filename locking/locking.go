package locking

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Locker is the lock contract. Implementations must be safe for concurrent
// use by multiple goroutines.
type Locker interface {
	// TryLock tries once, without waiting, to take key for ttl.
	// It returns a handle when the lock was taken, (nil, nil) when another
	// holder has it, and an error when the backend could not answer.
	TryLock(ctx context.Context, key string, ttl time.Duration) (*Handle, error)

	// Renew extends the lock by the handle's TTL, counted from now. Any error
	// means the caller no longer owns the lock (ErrLockLost when the backend
	// says so; other errors when it could not be asked, which callers must
	// treat the same way).
	Renew(ctx context.Context, h *Handle) error

	// Release gives the lock back. Only the holder of the handle's token can;
	// releasing a lock that expired or was taken over returns ErrLockLost and
	// leaves the newer holder's lock untouched.
	Release(ctx context.Context, h *Handle) error

	// Close releases every lock this Locker still holds and closes its
	// connections. After Close, TryLock, Renew and Release return ErrClosed;
	// a second Close returns nil, so deferred and explicit closes can meet.
	Close(ctx context.Context) error
}

// Pinger is implemented by backends that can tell whether they are reachable
// without taking a lock. The service uses it for /readyz.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Backend is what every lock backend of this repository implements: the
// lock contract, try-lock-tick (tick.go) and pause flags.
type Backend interface {
	Locker
	TickLocker
	Pauser
}

// LockInfo describes one held lock, as listed by a backend that can list.
type LockInfo struct {
	Key     string        // the caller's key, without any backend prefix
	Fence   int64         // fencing token of the current acquisition
	TTLLeft time.Duration // time until expiry; 0 when the backend has no TTL
	Holder  string        // who holds it (node id, pid), "" when unknown
}

// Sentinel errors. Backends wrap their driver errors in these at their edge
// so callers match with errors.Is and never depend on a driver's types.
var (
	// ErrLockLost: the handle no longer owns its lock (expired, taken over,
	// released already, or its session died).
	ErrLockLost = errors.New("locking: lock lost")
	// ErrClosed: the Locker was closed.
	ErrClosed = errors.New("locking: locker closed")
	// ErrInvalid: bad input (empty or oversized key, ttl too small, a nil
	// handle, a handle another Locker issued).
	ErrInvalid = errors.New("locking: invalid argument")
	// ErrUnavailable: the backend could not be reached or did not answer in
	// time. TryLock wraps it; the scheduler skips the tick as backend_error.
	ErrUnavailable = errors.New("locking: backend unavailable")
	// ErrPermission: the backend answered, refusing the operation to the
	// configured user (a read-only Postgres role, a Redis ACL user without
	// the commands). Not ErrUnavailable: waiting does not fix it, and the
	// refused operation changed nothing. The configuration (or the grants)
	// must change.
	ErrPermission = errors.New("locking: permission denied")
)

// MaxKeyLen bounds a key's length in bytes. Keys are logged and used in
// backend key names, so they stay readable.
const MaxKeyLen = 1024

// MinTTL is the smallest TTL any backend accepts: Redis expiries are counted
// in milliseconds, so anything smaller would round to "no expiry" or zero.
const MinTTL = time.Millisecond

// CheckKey reports whether key is a valid lock key: non-empty, valid UTF-8,
// at most MaxKeyLen bytes, and free of control characters (which would make
// logs and `locks` output ambiguous). Errors wrap ErrInvalid.
func CheckKey(key string) error {
	if key != "" && len(key) <= MaxKeyLen && printableASCII(key) {
		return nil // most keys; every try-lock-tick checks its key
	}
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, the limit is %d", ErrInvalid, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key %q is not valid UTF-8", ErrInvalid, key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: key %q contains a control character", ErrInvalid, key)
		}
	}
	return nil
}

// printableASCII reports whether every byte of s is ASCII and not a
// control character: valid UTF-8 free of control characters, in one pass.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// CheckTryLock validates TryLock's arguments; every backend calls it first.
func CheckTryLock(key string, ttl time.Duration) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if ttl < MinTTL {
		return fmt.Errorf("%w: ttl %v for key %q is below the minimum of %v", ErrInvalid, ttl, key, MinTTL)
	}
	return nil
}
