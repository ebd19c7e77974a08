package cluster

import (
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// The checks below are the argument validation every Store does first, so
// that bad input is refused alike (errors wrap ErrInvalid, and the cause from
// locking when there is one) on every backend, before anything is stored.

// CheckSchedule validates a schedule id (it is a lock key).
func CheckSchedule(id string) error {
	if err := locking.CheckKey(id); err != nil {
		return fmt.Errorf("%w: schedule id %q: %w", ErrInvalid, id, err)
	}
	return nil
}

// CheckKeep validates RecordRuns' keep: a history of no runs is a
// misconfiguration, not a way to delete one.
func CheckKeep(keep int) error {
	if keep < 1 {
		return fmt.Errorf("%w: keep %d, want at least 1", ErrInvalid, keep)
	}
	return nil
}

// CheckLimit validates Runs' limit.
func CheckLimit(limit int) error {
	if limit < 1 {
		return fmt.Errorf("%w: limit %d, want at least 1", ErrInvalid, limit)
	}
	return nil
}

// CheckNode validates an announcement and its ttl.
func CheckNode(n Node, ttl time.Duration) error {
	if err := CheckNodeID(n.NodeID); err != nil {
		return err
	}
	if ttl < locking.MinTTL {
		return fmt.Errorf("%w: node %q announced for %v, want at least %v", ErrInvalid, n.NodeID, ttl, locking.MinTTL)
	}
	return nil
}

// CheckNodeID validates a node id (Leave, TakeRequest).
func CheckNodeID(id string) error {
	if err := locking.CheckKey(id); err != nil {
		return fmt.Errorf("%w: node id %q: %w", ErrInvalid, id, err)
	}
	return nil
}

// CheckRequest validates a request to enqueue or mark done: it needs a
// schedule, an id (the run id it becomes) and a tick (its BEXT_TICK_TIME).
func CheckRequest(r Request) error {
	if err := CheckSchedule(r.Schedule); err != nil {
		return err
	}
	switch {
	case r.ID == "":
		return fmt.Errorf("%w: request for %q has no id", ErrInvalid, r.Schedule)
	case r.Tick.IsZero():
		return fmt.Errorf("%w: request %q for %q has no tick", ErrInvalid, r.ID, r.Schedule)
	}
	return nil
}

// CheckTake validates TakeRequest's arguments.
func CheckTake(r TakeReq) error {
	if err := CheckSchedule(r.Schedule); err != nil {
		return err
	}
	if err := CheckNodeID(r.Node); err != nil {
		return err
	}
	if err := locking.CheckTryLock(r.Schedule, r.TTL); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// CheckSkip validates a skip to record: a schedule, a tick and a reason.
func CheckSkip(k Skip) error {
	if err := CheckSchedule(k.Schedule); err != nil {
		return err
	}
	switch {
	case k.Tick.IsZero():
		return fmt.Errorf("%w: skip of %q has no tick", ErrInvalid, k.Schedule)
	case k.Reason == "":
		return fmt.Errorf("%w: skip of %q at %s has no reason", ErrInvalid, k.Schedule, k.Tick.UTC().Format(time.RFC3339Nano))
	}
	return nil
}
