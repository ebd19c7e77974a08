package locking

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// A counting lease: at most k holders at once of a group's k slots, each
// slot a lock of the contract (key SlotKey(group, i)), so that a slot is
// fenced, renewed and released as a lock is, and a dead holder's slot
// frees when its lease ends (TTL, or the Postgres session), like a lock.
// Built on TryLock alone, it needs nothing more of a backend; the
// conformance suite (lockertest, cases Slots/*) holds every backend to it.

// SlotKeyPrefix begins every slot's key. Schedule ids and `lock run`
// keys may not begin with it (config refuses such a schedule id), so a
// slot never shares a key with a schedule's lock.
const SlotKeyPrefix = "bext-group:"

// MaxSlots bounds a group's slots: a full group costs one try per slot.
const MaxSlots = 1000

// TryLocker is the part of Locker that TryLockSlot uses.
type TryLocker interface {
	TryLock(ctx context.Context, key string, ttl time.Duration) (*Handle, error)
}

// SlotKey is the lock key of slot i of group.
func SlotKey(group string, i int) string {
	return SlotKeyPrefix + group + "#" + strconv.Itoa(i)
}

// TryLockSlot takes one free slot of group's k slots for ttl and returns
// its handle and index: (nil, -1, nil) when all k are held. It tries the
// slots once each, from slot first (mod k) on, so that callers spreading
// their first choice rarely contend on one slot. It stops at the first
// error: a slot it could not ask about may be free, and a caller must not
// read "full" from a backend that did not answer.
func TryLockSlot(ctx context.Context, l TryLocker, group string, k, first int, ttl time.Duration) (*Handle, int, error) {
	if k < 1 || k > MaxSlots {
		return nil, -1, fmt.Errorf("%w: group %q has %d slots, want 1 to %d", ErrInvalid, group, k, MaxSlots)
	}
	if err := CheckKey(SlotKey(group, k-1)); err != nil {
		return nil, -1, fmt.Errorf("group %q: %w", group, err)
	}
	first %= k
	if first < 0 {
		first += k
	}
	for j := range k {
		i := (first + j) % k
		h, err := l.TryLock(ctx, SlotKey(group, i), ttl)
		if err != nil {
			return nil, -1, err
		}
		if h != nil {
			return h, i, nil
		}
	}
	return nil, -1, nil
}

// RerunKeyPrefix begins every re-run marker's key (on_node_loss =
// "rerun", internal/agent): a lock taken once per lost run, never
// released, that lets one node re-run it. Schedule ids may not begin
// with it (config).
const RerunKeyPrefix = "bext-rerun:"

// RerunKey is the re-run marker of schedule's run of tick.
func RerunKey(schedule string, tick time.Time) string {
	return RerunKeyPrefix + schedule + "@" + tick.UTC().Format(time.RFC3339Nano)
}
