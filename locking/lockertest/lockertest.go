// Package lockertest is the conformance suite every lock backend passes, so
// that "satisfies the locking contract" means the same thing for memory,
// Redis and Postgres. A backend's tests call Run with a Backend describing
// how to build lockers and what the backend can and cannot do; the suite
// never skips a case silently: a capability a backend lacks is declared in
// Backend and the suite then asserts the declared behaviour instead.
package lockertest

import (
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

	// MaxHeld is how many locks one Locker can hold at once (Postgres: one
	// session each); 0 means no limit. The suite holds min(MaxHeld, 10000)
	// distinct keys, and beyond MaxHeld expects a clear error, not contention.
	MaxHeld int
}

// Run runs the whole conformance suite against b.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if b.New == nil || b.Expire == nil {
		t.Fatal("lockertest: Backend.New and Backend.Expire are required")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, b) })
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, b Backend)
}

// cases is the suite, in the order the contract reads.
var cases []testCase
