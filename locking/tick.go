package locking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/mutation"
)

// TickLocker is the scheduler's part of the lock contract: try-lock-tick
// (DESIGN.md, "The lock contract" and its "Rules of the mark"). Every
// backend implements it; `lock run` and other plain users keep TryLock.
//
// Each key (a schedule id) has a tick mark: the latest tick ever claimed for
// it. The mark only moves forward and outlives every lock. TryLockTick
// decides, in one atomic step on the backend and on the backend's clock:
//
//   - the request is a resend: it carries the Token of an earlier granted
//     request for the same T (Key and Tick), and that grant's lease lives
//     (it was not released, nor did its lock end and go to another
//     holder): TickGranted with the fence that grant drew (the same
//     acquisition, never another's) and the grant's Before, its lease
//     extended as a renewal would (TTL from now). A request with a granted call's Token but
//     another T is no resend: it is decided as any other request. So is a
//     resend once its grant was released by its holder (Release, even one
//     that found the lock lapsed: done, T being marked): the holder ran T
//     or gave it up. A backend that cannot tell yet answers an error
//     wrapping ErrResendHeld (Postgres: the first attempt's session still
//     holds the lock), which is not definite: the caller resends until
//     decided;
//   - the request is a resend of a grant whose lease ended (its TTL ran
//     out from the grant or its last extension, with no Release): every
//     backend keeps a record of each granted request that carried a Token
//     (key, Token, T, fence, Before) for GrantKeep after its grant or last
//     extension, the time its caller goes on resending (a lost reply may
//     cost it longer than the TTL). Answered as DecideLapsedResend says:
//     TickGranted with the grant's own fence and Before (the same
//     acquisition continued: the lock is taken again, TTL from now) when no later
//     acquisition of its lock key came since, the lock is free, the key
//     is not paused and (schedule lock) the mark is still T; otherwise
//     TickExpired with the grant's fence (TickAnswer.Fence), and nothing
//     changes. Without the record a resend that came too late was
//     answered done: T granted, run nowhere and recorded nowhere;
//   - the request carries the Token and T of a resend (Resend) that was
//     answered contended or done, decided anew (not from a grant's
//     record): every backend keeps a record of that verdict for GrantKeep
//     and answers every later request with that Token and T the same
//     verdict, changing nothing (no lock, no mark). The scheduler resends
//     an undecided request, and an earlier attempt delayed on the network
//     may reach the backend after a later one was answered contended and
//     its node moved on: decided anew once the lock is free, it was
//     granted, T consumed and its lock held for a TTL, run by nobody. A
//     first attempt answered contended (N-1 nodes of every tick) writes
//     no record: without a resend its node never sends it again. A
//     request carrying a Token (first attempt or resend) answered paused
//     or missed, decided anew, leaves the same record of its verdict for
//     GrantKeep: its reply lost, its resend would be decided anew as done
//     (the mark is at T), and its node would record nothing of the tick it
//     consumed (audit: lost). Answered from the record, the verdict raises
//     nothing and carries the Before its first attempt answered (kept in
//     the record). Another T, or a request past the keep, is
//     decided anew; a request without a Token leaves no record;
//   - T lies more than MaxSkew ahead of the backend's clock: an error
//     wrapping ErrTickAhead (an *AheadError naming the offset); nothing
//     changes;
//   - the mark (raised to Floor, never past the backend's clock; a missing
//     mark counts as the backend's time minus MaxSkew) is at or past T:
//     TickDone;
//   - the key is paused: the mark is raised to T, TickPaused;
//   - T is more than max(MaxSkew, Window) behind the backend's clock: the
//     mark is raised to T, TickMissed;
//   - the lock is held: TickContended (nothing changes);
//   - else the lock is taken, the mark raised to T and a fence drawn:
//     TickGranted with a Handle that Renew and Release accept.
//
// The handle's fence is at least the backend's clock in microseconds and
// above every fence the key had before, whatever data the backend lost.
// A verdict that raises the mark (granted, paused, missed, decided anew)
// answers the stored mark it raised, TickAnswer.Before (TickBefore), and
// the record it leaves keeps it: an answer from a record (a grant's,
// while its lease lives or taken again after it lapsed; a paused or
// missed verdict's) carries the same Before, so that a resend after a
// lost reply lets its node record the ticks that step passed the mark
// over.
type TickLocker interface {
	TryLockTick(ctx context.Context, req TickRequest) (TickAnswer, error)
	// InitMarks creates the mark of every key that has none, at the
	// backend's time: a schedule never runs a tick from before it was
	// first loaded by any node. Existing marks are left alone.
	InitMarks(ctx context.Context, keys []string) error
}

// TickRequest is one try-lock-tick.
type TickRequest struct {
	// Key is the schedule's key: its mark, pause flag and fence live there,
	// and (unless PerTick) it is also the lock's key.
	Key string
	// Tick is T, the scheduled time being claimed.
	Tick time.Time
	// TTL is the lease of the lock taken.
	TTL time.Duration
	// PerTick makes the lock the tick's (Key and Tick) instead of the
	// schedule's, for overlap = "allow": runs of consecutive ticks may
	// overlap, each tick still once (the mark rules that).
	PerTick bool
	// Floor is the highest tick of Key the caller has itself seen decided
	// (zero: none). A backend that lost or rewound the mark raises it to
	// Floor (never past its own clock) before deciding.
	Floor time.Time
	// MaxSkew is the clock-skew tolerance: a T further ahead of the
	// backend's clock is refused (ErrTickAhead); a missing mark counts as
	// the backend's time minus MaxSkew.
	MaxSkew time.Duration
	// Window is the catch-up window: a T more than max(MaxSkew, Window)
	// behind the backend's clock is TickMissed.
	Window time.Duration
	// Token, when set, is the token the lock is stored under. A caller that
	// got no definite answer (a timeout, a connection error, ErrResendHeld:
	// the backend may have granted the tick) resends the same request with
	// the same Token until it is decided; the backend recognises the resend
	// by Token and T together and answers it from its grant (TickLocker).
	// A Token belongs to one request: another T asked with it is decided
	// as a fresh request. Empty: the backend draws one, and the request
	// cannot be resent.
	Token string
	// Resend is set on every send of a request after its first (the same
	// Token and T): the backend then keeps a record of a verdict it
	// decides anew as contended or done (see TickLocker), so that a late
	// copy of an earlier attempt, or another resend, is answered the same
	// and takes nothing. A first attempt answered contended writes nothing.
	// Paused and missed are recorded for every request with a Token,
	// Resend or not: the resend after a lost paused reply is told paused.
	Resend bool
}

// TickVerdict is try-lock-tick's decision.
type TickVerdict uint8

// The verdicts. Their strings are log values.
const (
	TickGranted   TickVerdict = iota + 1 // the lock is yours; run T
	TickDone                             // T (or a later tick) was already claimed
	TickContended                        // the lock is held by another run
	TickPaused                           // the key is paused; T is consumed
	TickMissed                           // T is later than the catch-up window; T is consumed
	// TickExpired answers a resend whose grant's lease ended before it
	// reached the backend, and that cannot be granted again (the lock was
	// taken since, a later tick was decided, the key is paused). Definite:
	// T was granted to this request and is consumed; the caller records it
	// as not run, with the grant's fence (TickAnswer.Fence).
	TickExpired
)

func (v TickVerdict) String() string {
	switch v {
	case TickGranted:
		return "granted"
	case TickDone:
		return "done"
	case TickContended:
		return "contended"
	case TickPaused:
		return "paused"
	case TickMissed:
		return "missed"
	case TickExpired:
		return "expired"
	}
	return fmt.Sprintf("TickVerdict(%d)", uint8(v))
}

// TickAnswer is try-lock-tick's answer.
type TickAnswer struct {
	Verdict TickVerdict
	// Handle is set with TickGranted only.
	Handle *Handle
	// Mark is the key's mark after the step (zero when the backend did not
	// read it, e.g. on a resent call).
	Mark time.Time
	// Now is the backend's clock when it decided; callers measure their
	// clock offset against it.
	Now time.Time
	// Fence is set with TickExpired: the fence the expired grant drew, for
	// the caller's record of the tick it did not run.
	Fence int64
	// Before is the key's mark before the step (the stored mark, not raised to
	// Floor), set with the verdicts that raise the mark (granted, paused,
	// missed) when the key had one; zero otherwise (no mark yet, another
	// verdict). An answer from a resend's record (granted from its grant's
	// record, or paused or missed from its verdict record) carries the
	// Before of the step that left the record: the first attempt's, whose
	// reply may have been lost. The scheduler records
	// the ticks of the schedule strictly between Before and T as skipped
	// (`stopped`): no node asked for them before this step passed the mark
	// over them.
	Before time.Time
}

// ErrTickAhead is wrapped by the error of a try-lock-tick whose T lies more
// than MaxSkew ahead of the backend's clock: this node's clock runs ahead.
var ErrTickAhead = errors.New("locking: tick is ahead of the backend's clock")

// ErrResendHeld is wrapped by the error of a resend the backend cannot
// decide yet: its grant's lock is still held by the first attempt, whose
// end the backend has not seen (Postgres: the session of the attempt whose
// reply was lost, until the server drops it, within MaxLease). It wraps
// ErrUnavailable: the answer is not definite, and the caller resends the
// same request until it is decided, as after a timeout.
var ErrResendHeld = fmt.Errorf("%w: the first attempt of this resent try-lock-tick still holds its lock", ErrUnavailable)

// AheadError is the error of a refused future tick; it wraps ErrTickAhead.
type AheadError struct {
	Key     string
	Tick    time.Time
	Offset  time.Duration // T minus the backend's clock
	MaxSkew time.Duration
}

func (e *AheadError) Error() string {
	return fmt.Sprintf("locking: tick %s of %q is %v ahead of the backend's clock (max_clock_skew %v): this node's clock runs ahead",
		e.Tick.UTC().Format(time.RFC3339Nano), e.Key, e.Offset, e.MaxSkew)
}

func (e *AheadError) Unwrap() error { return ErrTickAhead }

// CheckTickRequest validates TryLockTick's arguments; every backend calls
// it first. Errors wrap ErrInvalid.
func CheckTickRequest(r TickRequest) error {
	if err := CheckTryLock(r.Key, r.TTL); err != nil {
		return err
	}
	switch {
	case r.Tick.IsZero():
		return fmt.Errorf("%w: zero tick for key %q", ErrInvalid, r.Key)
	case r.MaxSkew < 0:
		return fmt.Errorf("%w: negative max skew %v for key %q", ErrInvalid, r.MaxSkew, r.Key)
	case r.Window < 0:
		return fmt.Errorf("%w: negative catch-up window %v for key %q", ErrInvalid, r.Window, r.Key)
	}
	return nil
}

// DecideTick is the decision of try-lock-tick on already-read state, for
// backends that decide in Go under a lock of their own (memory) and as the
// reference the Lua and SQL versions follow. mark is the stored mark (ok
// false when missing), paused the key's pause flag, held whether the lock
// is held by someone else. It returns the verdict (0 for "take the lock")
// and the mark to store (unchanged when equal to the effective mark).
// ahead is non-zero when T is too far ahead (the offset).
func DecideTick(r TickRequest, now time.Time, mark time.Time, ok, paused, held bool) (v TickVerdict, newMark time.Time, ahead time.Duration) {
	if off := r.Tick.Sub(now); off > r.MaxSkew {
		return 0, mark, off
	}
	eff := mark
	if !ok {
		eff = now.Add(-r.MaxSkew)
	}
	if mutation.On(mutation.IgnoreMark) { // mutation (simmut tag only): no mark counts, not even a missing one's
		eff = time.Time{}
	}
	if fl := minTime(r.Floor, now); fl.After(eff) {
		eff = fl
	}
	if !r.Tick.After(eff) {
		return TickDone, eff, 0
	}
	if paused {
		return TickPaused, r.Tick, 0
	}
	if now.Sub(r.Tick) > max(r.MaxSkew, r.Window) {
		return TickMissed, r.Tick, 0
	}
	if held {
		return TickContended, eff, 0
	}
	return 0, r.Tick, 0
}

// TickBefore is TickAnswer.Before of a step DecideTick decided as v (0:
// take the lock, which grants) on the stored mark (ok false when missing):
// the stored mark, as it was before the step, for the verdicts that raise
// the mark (granted, paused, missed) when the key had one; else zero. A
// backend keeps it in the record the step leaves, and answers it again to
// a resend answered from that record.
func TickBefore(v TickVerdict, mark time.Time, ok bool) time.Time {
	if !ok || (v != 0 && !v.Raised()) {
		return time.Time{}
	}
	return mark
}

// GrantKeep is how long a backend keeps the record of a granted
// try-lock-tick request after its grant or its last extension by a resend:
// twice the longer of its TTL and the backend's MaxLease (0 for backends
// whose locks last their TTL). A caller whose answer was not definite
// resends for that long (scheduler/resend.go), so a resend delayed past
// the grant's lease (a lost reply costs the caller its whole deadline)
// still finds the grant.
func GrantKeep(ttl, maxLease time.Duration) time.Duration {
	return 2 * max(ttl, maxLease)
}

// DecideLapsedResend is the decision on a resend (same Token and T) of a
// grant the backend still records (GrantKeep) but whose lease ended
// without a Release. mark is the stored mark (ok false when missing),
// paused the key's pause flag, taken whether the lock is held by anyone
// or was acquired by anyone since the grant (a fence drawn for the lock
// key since the grant's: memory keeps the key's last one, Redis reads the
// key's fence counter, Postgres the row's fence). It returns TickGranted
// when the lock may be taken again with the grant's fence: the lock is
// free and was not acquired since, the key is not paused and, for a
// schedule lock, the mark is still T (no later tick of the key was decided
// since: running T now would come after a later tick's decision). A
// per-tick lock (PerTick) does not ask the mark: later ticks of the key
// are decided while T runs. Otherwise TickExpired: nothing changes, and
// the caller records T as not run. A paused key is TickExpired too, not
// TickPaused: T was granted before the pause, and its record (not run,
// with its fence) says where it went.
func DecideLapsedResend(r TickRequest, mark time.Time, ok, paused, taken bool) TickVerdict {
	switch {
	case taken, paused:
		return TickExpired
	case !r.PerTick && (!ok || mark.UnixMicro() != r.Tick.UnixMicro()):
		return TickExpired
	}
	return TickGranted
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// TickLockKey is the key a per-tick lock (PerTick) is taken under, for
// backends that keep locks by key: the schedule's key and T in
// microseconds since the epoch. Listing shows it as such.
func TickLockKey(key string, tick time.Time) string {
	return fmt.Sprintf("%s@%d", key, tick.UnixMicro())
}

// Pause is a key's pause flag, read inside try-lock-tick (so a pause
// committed before a grant always wins) and set by operators.
type Pause struct {
	Paused bool
	// Until, when set, ends the pause by itself at that time (backend's
	// clock); zero: until resumed.
	Until time.Time
	// Note says why (free text, shown to operators); empty allowed.
	Note string
}

// Active reports whether p pauses a tick decided at now.
func (p Pause) Active(now time.Time) bool {
	return p.Paused && (p.Until.IsZero() || now.Before(p.Until))
}

// Pauser sets and reads pause flags where try-lock-tick reads them. Every
// backend implements it. A pause takes effect for every try-lock-tick that
// starts after SetPause returns.
type Pauser interface {
	SetPause(ctx context.Context, key string, p Pause) error
	GetPause(ctx context.Context, key string) (Pause, error)
}

// LeaseBounder is implemented by backends on which a silent holder can
// lose its lock before its TTL runs out (Postgres drops a dead peer's
// session, and with it its advisory locks, after the server's dead-peer
// time). MaxLease is how long a lock is certain to last after its last
// successful acquisition or renewal without another one; the scheduler
// renews well within it and cancels a job whose lease ran out. Backends
// that do not implement it keep a lock for its TTL.
type LeaseBounder interface {
	MaxLease() time.Duration
}
