// Package locking owns the lock contract that every bext-scheduler lock
// backend implements and that the scheduler (and `bext-scheduler lock run`)
// rely on: try-lock, renew, release, close.
//
// The contract has one rule callers branch on: TryLock answers in three ways.
//
//   - (*Handle, nil): you hold the lock until its TTL runs out or you release it.
//   - (nil, nil): someone else holds it. Contention is not a failure; retry later.
//   - (nil, err): the backend itself is broken (unreachable, connection dropped,
//     bad input). Alert; never treat it as "free".
//
// Renew and Release errors mean "you no longer own this lock": stop acting as
// its holder. A stale handle (expired, then re-acquired by someone else) can
// never extend or release the newer holder's lock, because every acquisition
// carries a fresh 128-bit random token that the backend checks.
//
// Every acquisition also gets a fencing token: a number that strictly increases
// with each acquisition of that key. A job that writes to a resource passes the
// token along so the resource can refuse writes from a holder that stalled past
// its lease (see Martin Kleppmann's "How to do distributed locking").
//
// Backends live in subpackages (memory, redis, pg) and all pass the same
// conformance suite in locking/lockertest.
//
// Beyond Locker, a backend implements the optional interfaces the scheduler
// looks for: TickLocker (tick.go), TickWatcher (watch.go), MarkReader
// (mark.go), Pauser, Pinger, LeaseBounder, and, for how it takes many
// requests at once, TickBatcher, ReleaseBatcher and InProcessLocker
// (batch.go). A bad URL in its options is an *InvalidError (invalid.go),
// which the config prints without parsing the message.
package locking
