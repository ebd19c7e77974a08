package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Defaults for Options fields left zero.
const (
	DefaultKeyPrefix = "bext:lock:"
	DefaultOpTimeout = 2 * time.Second
)

// Suffixes that make a lock key (prefix{key}) into the keys kept next to
// it, in its hash slot: the fencing counter, the tick mark, the pause flag
// and the per-tick locks (tickSuffix + T in microseconds). None of them
// ends with '}', which is how List tells them from the locks.
const (
	fenceSuffix = ":fence"
	markSuffix  = ":mark"
	pauseSuffix = ":pause"
	tickSuffix  = ":tick:"
)

// The stored value of a lock is token + fenceSep + fence, then holderSep +
// Options.Holder when set. The token is hex and the fence decimal, so the
// first holderSep always starts the holder.
const (
	fenceSep  = "#"
	holderSep = "|"
)

var (
	//go:embed lib.lua
	libSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed tick.lua
	tickSrc string
	//go:embed initmark.lua
	initMarkSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string

	// The scripts run by EVALSHA, falling back to EVAL (which also loads
	// them) on NOSCRIPT, e.g. after a Redis restart flushed the cache.
	acquireScript  = goredis.NewScript(libSrc + acquireSrc)
	tickScript     = goredis.NewScript(libSrc + tickSrc)
	initMarkScript = goredis.NewScript(initMarkSrc)
	renewScript    = goredis.NewScript(renewSrc)
	releaseScript  = goredis.NewScript(releaseSrc)
)

// Options configure a Locker.
type Options struct {
	// URL names the server: redis:// or rediss:// (TLS, certificate
	// verified), with user, password and database, or a Sentinel or Cluster
	// address list; see the package doc. Used by Open only.
	URL string
	// KeyPrefix is put before every key; default DefaultKeyPrefix.
	KeyPrefix string
	// OpTimeout bounds every operation, and caps the client's dial, read,
	// write and pool timeouts; default DefaultOpTimeout.
	OpTimeout time.Duration
	// Holder says who holds a lock (e.g. node id and pid); it is stored
	// with each lock and shown by List. Optional.
	Holder string
}

// Locker is the Redis lock backend. It is safe for concurrent use.
type Locker struct {
	client     goredis.UniversalClient
	ownsClient bool // Close closes the client only when Open made it
	prefix     string
	opTimeout  time.Duration
	holderArg  string // "" or holderSep + Options.Holder, as stored after the fence

	mu     sync.Mutex
	closed bool
	held   map[*locking.Handle]struct{} // for Close to release
}

var (
	_ locking.Locker = (*Locker)(nil)
	_ locking.Pinger = (*Locker)(nil)
)

// heldLock is a handle's backend state: the keys it names and the exact value
// stored at acquire time, which renew and release compare against.
type heldLock struct {
	lockKey string
	value   string
}

// Open builds a Locker for opts.URL. It does not contact Redis: a node
// must start while its backend is down and recover when it returns, so an
// unreachable server shows up as ErrUnavailable from operations (and
// Ping), never here. A malformed URL is an error wrapping
// locking.ErrInvalid, with any password redacted.
func Open(opts Options) (*Locker, error) {
	if opts.OpTimeout < 0 {
		return nil, fmt.Errorf("%w: Redis op timeout %v is negative", locking.ErrInvalid, opts.OpTimeout)
	}
	opts = withDefaults(opts)
	client, err := newClient(opts.URL, opts.OpTimeout)
	if err != nil {
		return nil, err
	}
	l := New(client, opts)
	l.ownsClient = true
	return l, nil
}

// New builds a Locker on a client the caller owns (Close leaves it open).
// opts.URL is ignored. For the timeout guarantee, the client's own dial,
// read and write timeouts should not exceed opts.OpTimeout.
func New(client goredis.UniversalClient, opts Options) *Locker {
	opts = withDefaults(opts)
	return &Locker{
		client:    client,
		prefix:    opts.KeyPrefix,
		opTimeout: opts.OpTimeout,
		holderArg: holderArg(opts.Holder),
		held:      make(map[*locking.Handle]struct{}),
	}
}

func holderArg(holder string) string {
	if holder == "" {
		return ""
	}
	return holderSep + holder
}

func withDefaults(o Options) Options {
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	return o
}

// TryLock takes key for ttl if nobody holds it. The acquire and the
// fencing counter's increment run in one script, so the fence is drawn
// exactly when the lock is taken.
func (l *Locker) TryLock(ctx context.Context, key string, ttl time.Duration) (*locking.Handle, error) {
	if err := locking.CheckTryLock(key, ttl); err != nil {
		return nil, err
	}
	if err := l.checkOpen(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("locking/redis: try-lock %q: %w", key, context.Cause(ctx))
	}
	token, err := locking.NewToken()
	if err != nil {
		return nil, err
	}
	// One allocation for both keys: the fence key is the lock key plus a
	// suffix, so the lock key is a prefix of it.
	fenceKey := l.prefix + "{" + key + "}" + fenceSuffix // = lockKey(key) + fenceSuffix
	lockKey := fenceKey[:len(fenceKey)-len(fenceSuffix)]

	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	fence, err := replyInt(acquireScript.Run(opCtx, l.client,
		[]string{lockKey, fenceKey}, token, l.holderArg, ttl.Milliseconds()))
	switch {
	case err != nil:
		return nil, l.opError(ctx, "try-lock", key, err)
	case fence == 0:
		return nil, nil // held by someone else
	case fence < 0:
		return nil, fmt.Errorf("locking/redis: try-lock %q: %w: fence %d", key, errReply, fence)
	}
	return l.track(ctx, key, lockKey, token, fence, ttl)
}

// track builds the handle of a lock just taken and registers it for Close.
func (l *Locker) track(ctx context.Context, key, lockKey, token string, fence int64, ttl time.Duration) (*locking.Handle, error) {
	st := &heldLock{lockKey: lockKey, value: l.storedValue(token, fence)}
	h := locking.NewHandle(l, key, token, fence, ttl, st)
	l.mu.Lock()
	if l.closed {
		// Close ran while we were acquiring and has already swept: give
		// the lock back rather than leave it to expire.
		l.mu.Unlock()
		_ = l.release(context.WithoutCancel(ctx), h, st)
		return nil, locking.ErrClosed
	}
	l.held[h] = struct{}{}
	l.mu.Unlock()
	return h, nil
}

// storedValue is the value the scripts store for a lock of token with fence
// (see lib.lua); renew and release compare it exactly.
func (l *Locker) storedValue(token string, fence int64) string {
	var b [20]byte
	return token + fenceSep + string(strconv.AppendInt(b[:0], fence, 10)) + l.holderArg
}

// Renew extends the lock by its TTL from now, if it is still h's.
func (l *Locker) Renew(ctx context.Context, h *locking.Handle) error {
	st, err := l.state(h)
	if err != nil {
		return err
	}
	if err := canceled(ctx, "renew", h); err != nil {
		return err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	n, err := replyInt(renewScript.Run(opCtx, l.client, []string{st.lockKey}, st.value, h.TTL().Milliseconds()))
	if err != nil {
		// The lock may still be ours on the server, so Close will still
		// try to release it; the caller must stop acting as holder anyway.
		return l.opError(ctx, "renew", h.Key(), err)
	}
	if n != 1 {
		l.forget(h)
		return fmt.Errorf("locking/redis: renew %v: %w", h, locking.ErrLockLost)
	}
	return nil
}

// Release deletes the lock if it is still h's. A lock that expired or
// was taken over is left alone and reported as ErrLockLost.
func (l *Locker) Release(ctx context.Context, h *locking.Handle) error {
	st, err := l.state(h)
	if err != nil {
		return err
	}
	if err := canceled(ctx, "release", h); err != nil {
		return err
	}
	return l.release(ctx, h, st)
}

func (l *Locker) release(ctx context.Context, h *locking.Handle, st *heldLock) error {
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	n, err := replyInt(releaseScript.Run(opCtx, l.client, []string{st.lockKey}, st.value))
	if err != nil {
		return l.opError(ctx, "release", h.Key(), err)
	}
	l.forget(h)
	if n != 1 {
		return fmt.Errorf("locking/redis: release %v: %w", h, locking.ErrLockLost)
	}
	return nil
}

// Close releases every lock this Locker still holds, then closes the
// client if Open made it. Releases run on a fresh context (ctx's values,
// not its cancellation), each bounded by OpTimeout, so a shutdown whose
// context is already cancelled still gives its locks back. If Redis does
// not answer, the remaining locks are left to expire with their TTL.
// Closing again is a no-op that returns nil (the conformance suite's
// reading of the contract); every other method returns ErrClosed.
func (l *Locker) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil // shutdown paths may close twice; the first did the work
	}
	l.closed = true
	handles := make([]*locking.Handle, 0, len(l.held))
	for h := range l.held {
		handles = append(handles, h)
	}
	l.mu.Unlock()

	base := context.WithoutCancel(ctx)
	var errs []error
	for i, h := range handles {
		st, _ := locking.HandleState(h, l)
		err := l.release(base, h, st.(*heldLock))
		if err == nil || errors.Is(err, locking.ErrLockLost) {
			continue // gone either way
		}
		errs = append(errs, err)
		if errors.Is(err, locking.ErrUnavailable) {
			if left := len(handles) - i - 1; left > 0 {
				errs = append(errs, fmt.Errorf("locking/redis: close: %d more locks left to expire with their TTL", left))
			}
			break
		}
	}
	if l.ownsClient {
		if err := l.client.Close(); err != nil {
			errs = append(errs, fmt.Errorf("locking/redis: closing client: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Ping reports whether Redis answers within OpTimeout.
func (l *Locker) Ping(ctx context.Context) error {
	if err := l.checkOpen(); err != nil {
		return err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	if err := l.client.Ping(opCtx).Err(); err != nil {
		return l.opError(ctx, "ping", "", err)
	}
	return nil
}

// opContext bounds one operation by OpTimeout. A caller's deadline that
// is already as tight is used as is: deriving a timer context costs more
// than a microsecond and a few allocations on every call.
func (l *Locker) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= l.opTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.opTimeout)
}

// lockKey is the Redis key of key's lock. The braces make key a Redis
// Cluster hash tag, so the lock and its fence counter (lockKey+fenceSuffix)
// share one slot, as a script touching both requires.
func (l *Locker) lockKey(key string) string {
	return l.prefix + "{" + key + "}"
}

func (l *Locker) checkOpen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return locking.ErrClosed
	}
	return nil
}

// state checks h (nil or foreign handles are ErrInvalid) and that the
// Locker is open, and returns h's backend state.
func (l *Locker) state(h *locking.Handle) (*heldLock, error) {
	s, err := locking.HandleState(h, l)
	if err != nil {
		return nil, err
	}
	st, ok := s.(*heldLock)
	if !ok {
		return nil, fmt.Errorf("%w: %v carries no Redis lock state", locking.ErrInvalid, h)
	}
	return st, l.checkOpen()
}

// canceled reports the caller's cancellation before any round trip, so a
// cancelled context is honoured even on a client without context timeouts.
func canceled(ctx context.Context, op string, h *locking.Handle) error {
	if ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("locking/redis: %s %v: %w", op, h, context.Cause(ctx))
}

func (l *Locker) forget(h *locking.Handle) {
	l.mu.Lock()
	delete(l.held, h)
	l.mu.Unlock()
}

// opError maps a failed call to the contract's errors: the caller's own
// cancellation stays a context error (its deadline passing mid-call is
// ErrUnavailable too); a reply of the wrong shape is its own error;
// anything else means Redis could not answer (unreachable, timed out, or
// replied with an error) and wraps ErrUnavailable, keeping the cause.
func (l *Locker) opError(ctx context.Context, op, key string, err error) error {
	what := op
	if key != "" {
		what = fmt.Sprintf("%s %q", op, key)
	}
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("locking/redis: %s: %w", what, context.Cause(ctx))
	case ctx.Err() != nil:
		// The caller's own deadline ran out while Redis had not answered:
		// the backend was too slow, which is what ErrUnavailable means.
		return fmt.Errorf("locking/redis: %s: %w: %w", what, locking.ErrUnavailable, context.Cause(ctx))
	case errors.Is(err, errReply):
		return fmt.Errorf("locking/redis: %s: %w", what, err)
	}
	return fmt.Errorf("locking/redis: %s: %w: %w", what, locking.ErrUnavailable, err)
}

// errReply marks a reply of an unexpected shape.
var errReply = errors.New("unexpected reply")

// replyInt decodes a script's reply strictly as a Redis integer. Anything
// else (a nil, a string, a float) is an error, never a guess: deciding
// "it worked" from a reply of the wrong type is how a lost lock is taken
// for a held one.
func replyInt(cmd *goredis.Cmd) (int64, error) {
	v, err := cmd.Result()
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%w: %T %v, want an integer", errReply, v, v)
	}
	return n, nil
}

// splitValue returns the holder part of a stored value, dropping the
// token (a capability, never shown).
func splitValue(v string) (holder string) {
	if _, h, ok := strings.Cut(v, holderSep); ok {
		return h
	}
	return ""
}
