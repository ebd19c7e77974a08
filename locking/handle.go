package locking

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// Handle is the proof of holding one lock. It is opaque to callers: they may
// read its key, fencing token and TTL, and pass it back to the Locker that
// issued it. A Handle must not be copied by value (use the pointer).
type Handle struct {
	key    string
	token  string
	fence  int64
	ttl    time.Duration
	issuer any // the Locker that issued it, to refuse foreign handles
	state  any // backend-private (e.g. the pinned Postgres session)
}

// Key is the lock key the handle holds, as the caller gave it.
func (h *Handle) Key() string { return h.key }

// Token is the random 128-bit token (32 hex digits) that identifies this
// acquisition to the backend. It is a capability: do not log it.
func (h *Handle) Token() string { return h.token }

// Fence is the fencing token: it strictly increases with each acquisition
// of the key, so a protected resource can refuse a stale holder's writes.
func (h *Handle) Fence() int64 { return h.fence }

// TTL is the lease length the lock was taken with; Renew extends by it.
func (h *Handle) TTL() time.Duration { return h.ttl }

// String identifies the handle in logs without revealing its token.
func (h *Handle) String() string {
	if h == nil {
		return "<nil handle>"
	}
	return fmt.Sprintf("lock %q (fence %d)", h.key, h.fence)
}

// NewToken returns a fresh 128-bit random token from crypto/rand, hex-encoded.
func NewToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("locking: reading random token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// NewHandle is for backend implementations: it builds the handle a backend
// returns from TryLock. issuer is the backend's Locker value, used later by
// HandleState to refuse handles issued by another Locker; state is
// backend-private data returned by HandleState.
func NewHandle(issuer any, key, token string, fence int64, ttl time.Duration, state any) *Handle {
	return &Handle{key: key, token: token, fence: fence, ttl: ttl, issuer: issuer, state: state}
}

// HandleState is for backend implementations: it checks that h is non-nil
// and was issued by issuer, and returns its backend-private state. Errors
// wrap ErrInvalid, so a nil or foreign handle never panics a backend.
func HandleState(h *Handle, issuer any) (any, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: nil handle", ErrInvalid)
	}
	if h.issuer != issuer {
		return nil, fmt.Errorf("%w: %v was issued by another locker", ErrInvalid, h)
	}
	return h.state, nil
}
