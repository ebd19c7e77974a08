package redis

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// Options.Holder when set; a try-lock-tick's token is followed by tickSep
// and T (tickTag). The token is hex and the fence decimal, so the first
// holderSep always starts the holder.
const (
	fenceSep  = "#"
	holderSep = "|"
)

var (
	//go:embed lib.lua
	libSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed tickstep.lua
	tickStepSrc string
	//go:embed tick.lua
	tickSrc string
	//go:embed ticks.lua
	ticksSrc string
	//go:embed initmark.lua
	initMarkSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed releases.lua
	releasesSrc string

	// The scripts run by EVALSHA, falling back to EVAL (which also loads
	// them) on NOSCRIPT, e.g. after a Redis restart flushed the cache.
	acquireScript  = goredis.NewScript(libSrc + acquireSrc)
	tickScript     = goredis.NewScript(libSrc + tickStepSrc + tickSrc)
	ticksScript    = goredis.NewScript(libSrc + tickStepSrc + ticksSrc)
	initMarkScript = goredis.NewScript(initMarkSrc)
	renewScript    = goredis.NewScript(renewSrc)
	releaseScript  = goredis.NewScript(releaseSrc)
	releasesScript = goredis.NewScript(releasesSrc)
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
	holderBox  any    // holderArg boxed once: a script argument without an allocation per call
	ttlBox     atomic.Pointer[ttlArg]

	mu     sync.Mutex
	closed bool
	// shut mirrors closed for checkOpen, which every call makes: a load
	// instead of a lock. track still decides under mu, so no lock is
	// registered after Close swept.
	shut atomic.Bool
	held map[*locking.Handle]struct{} // for Close to release
}

var (
	_ locking.Locker = (*Locker)(nil)
	_ locking.Pinger = (*Locker)(nil)
	// The batching contract (locking/batch.go).
	_ locking.TickBatcher    = (*Locker)(nil)
	_ locking.ReleaseBatcher = (*Locker)(nil)
)

// heldLock is a handle's backend state: the keys it names and the exact value
// stored at acquire time, which renew and release compare against. It is
// allocated before the acquire and carries what the call needs (the keys
// slice, the operation's deadline), so that a try-lock + release costs few
// allocations beyond go-redis's own (see lean_bench_test.go).
type heldLock struct {
	keys [2]string // lock key; fence key (TryLock's acquire only)
	// args are a call's script arguments, kept here so the variadic call
	// does not allocate them: TryLock's token, holder and TTL, then, once
	// the lock is held, the value and TTL that renew passes (release the
	// value alone). Read-only once the handle exists.
	args [3]any
	// value is the stored value, token + fenceSep + fence + holder: in buf
	// when it fits. TryLock draws the token into buf directly.
	value []byte
	buf   [valueBuf]byte
	op    deadlineCtx
}

// valueBuf holds a token, a try-lock-tick's T, a fence and a holder name
// of up to 43 bytes.
const valueBuf = tokenLen + len(tickSep) + 20 + len(fenceSep) + 20 + len(holderSep) + 43

// tokenLen is the length of the tokens TryLock draws: 16 random bytes in hex,
// as locking.NewToken's.
const tokenLen = 32

// tokenArg and valueArg pass a heldLock's token and value to go-redis as
// its bytes (encoding.BinaryMarshaler): a pointer in an interface costs no
// allocation, a string does. Their String hides the token, should go-redis
// ever print a command.
type (
	tokenArg heldLock
	valueArg heldLock
)

func (a *tokenArg) MarshalBinary() ([]byte, error) { return a.buf[:tokenLen], nil }
func (a *tokenArg) String() string                 { return "<token>" }
func (a *valueArg) MarshalBinary() ([]byte, error) { return a.value, nil }
func (a *valueArg) String() string                 { return "<token>" + fenceSep + "<fence>" }

func (st *heldLock) lockKey() string { return st.keys[0] }

// ttlArg is a TTL in milliseconds boxed as a script argument. The Locker
// keeps the last one used: callers use one TTL over and over, and boxing
// an int64 above 255 allocates.
type ttlArg struct {
	ms  int64
	arg any
}

// ttlArg returns ttl in milliseconds as a script argument.
func (l *Locker) ttlArg(ttl time.Duration) any {
	ms := ttl.Milliseconds()
	if a := l.ttlBox.Load(); a != nil && a.ms == ms {
		return a.arg
	}
	a := &ttlArg{ms: ms, arg: ms}
	l.ttlBox.Store(a)
	return a.arg
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
		holderBox: holderArg(opts.Holder),
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
	st := &heldLock{}
	// The token, as locking.NewToken draws it, written into the lock's
	// state: it is sent from there, and the handle's string is made once.
	var random [tokenLen / 2]byte
	if _, err := rand.Read(random[:]); err != nil {
		return nil, fmt.Errorf("locking: reading random token: %w", err)
	}
	hex.Encode(st.buf[:tokenLen], random[:])
	// One allocation for both keys: the fence key is the lock key plus a
	// suffix, so the lock key is a prefix of it.
	fenceKey := l.prefix + "{" + key + "}" + fenceSuffix // = lockKey(key) + fenceSuffix
	st.keys = [2]string{fenceKey[:len(fenceKey)-len(fenceSuffix)], fenceKey}
	st.args = [3]any{(*tokenArg)(st), l.holderBox, l.ttlArg(ttl)}

	fence, err := replyInt(acquireScript.Run(l.opContextIn(ctx, &st.op), l.client, st.keys[:], st.args[:]...))
	st.op = deadlineCtx{} // keep nothing of the caller's context
	switch {
	case err != nil:
		return nil, l.opError(ctx, "try-lock", key, err)
	case fence == 0:
		return nil, nil // held by someone else
	case fence < 0:
		return nil, fmt.Errorf("locking/redis: try-lock %q: %w: fence %d", key, errReply, fence)
	}
	// The handle's token string is made only now: a try-lock answered
	// "held" (every node but one, each time a key is asked for) would
	// allocate it for nothing.
	token := string(st.buf[:tokenLen])
	return l.track(ctx, key, st, token, token, fence, ttl)
}

// newHeld is the state of a lock of lockKey about to be taken by a script
// that names its keys itself.
func newHeld(lockKey string) *heldLock {
	return &heldLock{keys: [2]string{lockKey}}
}

// track builds the handle of a lock just taken (st from the acquire) and
// registers it for Close.
// The stored value starts with tag: the token, or a try-lock-tick's
// token and T (tickTag).
func (l *Locker) track(ctx context.Context, key string, st *heldLock, token, tag string, fence int64, ttl time.Duration) (*locking.Handle, error) {
	// Built in buf when it fits (TryLock's token is already at its start:
	// the first append copies it onto itself).
	v := append(st.buf[:0], tag...)
	v = append(v, fenceSep...)
	v = strconv.AppendInt(v, fence, 10)
	st.value = append(v, l.holderArg...)
	st.args = [3]any{(*valueArg)(st), l.ttlArg(ttl)}
	h := locking.NewHandle(l, key, token, fence, ttl, st)
	l.mu.Lock()
	if l.closed {
		// Close ran while we were acquiring and has already swept: give
		// the lock back rather than leave it to expire.
		l.mu.Unlock()
		_ = l.release(context.WithoutCancel(ctx), h, st, true)
		return nil, locking.ErrClosed
	}
	l.held[h] = struct{}{}
	l.mu.Unlock()
	return h, nil
}

// storedValue is the value the scripts store for a lock of token (a
// try-lock-tick's: its tickTag) with fence (see lib.lua); renew and
// release compare it exactly.
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
	n, err := replyInt(renewScript.Run(opCtx, l.client, st.keys[:1], st.args[:2]...))
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
	return l.release(ctx, h, st, false)
}

// release runs release.lua for h. closing: Close's release, which is not
// its taker's word that it heard a take (take.lua): a take's trigger not
// heard back stays pending, to go back to its queue.
func (l *Locker) release(ctx context.Context, h *locking.Handle, st *heldLock, closing bool) error {
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	args := st.args[:1]
	if closing {
		args = []any{st.args[0], "closing"}
	}
	n, err := replyInt(releaseScript.Run(opCtx, l.client, st.keys[:1], args...))
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
	l.shut.Store(true)
	handles := make([]*locking.Handle, 0, len(l.held))
	for h := range l.held {
		handles = append(handles, h)
	}
	l.mu.Unlock()

	base := context.WithoutCancel(ctx)
	var errs []error
	for i, h := range handles {
		st, _ := locking.HandleState(h, l)
		err := l.release(base, h, st.(*heldLock), true)
		if err == nil || errors.Is(err, locking.ErrLockLost) {
			continue // gone either way
		}
		errs = append(errs, err)
		if _, ok := l.client.(*goredis.ClusterClient); ok {
			continue // one master down says nothing of the others' locks
		}
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

// opContext bounds one operation by OpTimeout: ctx with a deadline
// OpTimeout from now (or ctx itself when its own deadline is as tight). The
// cancel func is kept for the callers' shape; there is nothing to cancel.
func (l *Locker) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return l.opContextIn(ctx, new(deadlineCtx)), noCancel
}

func noCancel() {}

// opContextIn is opContext building its context in dc, which the caller
// allocated along with something else (heldLock carries one).
func (l *Locker) opContextIn(ctx context.Context, dc *deadlineCtx) context.Context {
	d := time.Now().Add(l.opTimeout)
	if pd, ok := ctx.Deadline(); ok && !pd.After(d) {
		return ctx
	}
	*dc = deadlineCtx{Context: ctx, deadline: d}
	return dc
}

// deadlineCtx is ctx with an earlier deadline and no timer behind it.
// context.WithTimeout costs a timer, a channel and four allocations per
// call, and the timer's start and stop contend between goroutines: most of
// this package's overhead over bare go-redis. go-redis needs no
// timer to honour the deadline: every wait of a command reads Deadline
// (the socket's read and write deadlines, the dial) or has its own bound
// no longer than OpTimeout (the pool wait, PoolTimeout); a retry after
// the deadline fails at once on a socket deadline already past. Only the
// retry backoff (at most MaxRetryBackoff per retry) waits on Done alone.
//
// Done and Err are the parent's: the context is never done by itself, so
// it keeps the contract that Err is nil until Done is closed. It is handed
// to go-redis only, never to code that would wait on Done for the
// deadline.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// lockKey is the Redis key of key's lock. The braces make key a Redis
// Cluster hash tag, so the lock and its fence counter (lockKey+fenceSuffix)
// share one slot, as a script touching both requires.
func (l *Locker) lockKey(key string) string {
	return l.prefix + "{" + key + "}"
}

func (l *Locker) checkOpen() error {
	if l.shut.Load() {
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
	case deadlinePassed(ctx):
		// go-redis sets the socket's deadline to the context's, and the
		// socket's timer can fire a moment before the context's own: the
		// i/o timeout is still the caller's deadline, and says so.
		return fmt.Errorf("locking/redis: %s: %w: %w (%w)", what, locking.ErrUnavailable, context.DeadlineExceeded, err)
	case errors.Is(err, errReply):
		return fmt.Errorf("locking/redis: %s: %w", what, err)
	case refused(err):
		return fmt.Errorf("locking/redis: %s: %w: %w", what, locking.ErrPermission, err)
	}
	return fmt.Errorf("locking/redis: %s: %w: %w", what, locking.ErrUnavailable, err)
}

// refused reports whether Redis refused err's call to this user: an ACL
// user without the command or key (NOPERM), or credentials it does not
// accept (WRONGPASS, NOAUTH).
func refused(err error) bool {
	var re goredis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH")
}

// deadlinePassed reports whether ctx's deadline is behind us, whether or
// not its timer has fired yet.
func deadlinePassed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
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
