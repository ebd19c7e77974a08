package pg

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// TestTurn3RenewIgnoresCallersDeadline: Renew with a 1 s deadline over a
// stalled link returns within it. The scheduler's lease ends at its own
// deadline; a Renew bounded by OpTimeout alone let the job run seconds past
// it, until the server could free the lock for another node.
func TestTurn3RenewIgnoresCallersDeadline(t *testing.T) {
	c := newCluster(t)
	p, u := c.proxied()
	a := c.open(Options{URL: u})
	h := mustTick(t, a, tickReq("part", c.dbNow()), locking.TickGranted, "A takes part")
	p.Blackhole()
	defer p.Heal()
	rctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err := a.Renew(rctx, h.Handle)
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Fatalf("Renew with a 1s deadline returned %v after %v: the job ran past its lease", err, took)
	}
	if err == nil {
		t.Fatal("Renew over a blackholed link succeeded")
	}
}

// TestTurn3RenewQueuesBehindUnrelatedTick: on one session, a try-lock-tick
// of schedule B waits on B's row (an operator's transaction holds it).
// A's renewal on that session answers within its 1 s deadline, B's request
// fails alone (lock_timeout, a non-definite error), and the session that
// holds A's lock lives on: one slow statement of one schedule does not
// cancel another schedule's job.
func TestTurn3RenewQueuesBehindUnrelatedTick(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 1})
	ctx := context.Background()
	if err := l.InitMarks(ctx, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	now := c.dbNow()
	ha := mustTick(t, l, tickReq("a", now), locking.TickGranted, "A")
	holder := c.holderPID("a")

	tx, err := c.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM bext_lock_fences WHERE namespace = $1 AND key = 'b' FOR UPDATE`, c.ns); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.TryLockTick(ctx, tickReq("b", now))
		done <- err
	}()
	c.waitBlocked()

	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	err = l.Renew(rctx, ha.Handle)
	if took := time.Since(start); err != nil || took > time.Second {
		t.Errorf("A's Renew behind B's stuck tick = %v after %v; want success within its 1s deadline", err, took)
	}

	// B fails by itself, while the operator still holds its row.
	select {
	case err := <-done:
		if !errors.Is(err, locking.ErrUnavailable) {
			t.Errorf("B's try-lock-tick stuck on its row = %v; want an error wrapping ErrUnavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B's try-lock-tick still waits on its row after 10s")
	}
	if pid := c.holderPID("a"); pid != holder {
		t.Errorf("A's lock is held by backend %d, want %d: B's failure ended the session holding it", pid, holder)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx, ha.Handle); err != nil {
		t.Errorf("A's Renew after the operator's transaction ended = %v; A's lock was lost", err)
	}
	if err := l.Release(ctx, ha.Handle); err != nil {
		t.Errorf("A's Release = %v", err)
	}
}

// TestRenewGoesBeforeQueuedTicks: a renewal waiting for its session's slot
// is served before the statements queued ahead of it. Here a tick batch
// queued first would, once sent, wait on its row (an operator holds it):
// in line behind it, the renewal would miss its deadline.
func TestRenewGoesBeforeQueuedTicks(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 1})
	ctx := context.Background()
	if err := l.InitMarks(ctx, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	now := c.dbNow()
	ha := mustLock(t, l, "a")
	s := h2lease(t, l, ha).sess
	tx, err := c.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM bext_lock_fences WHERE namespace = $1 AND key = 'b' FOR UPDATE`, c.ns); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			l.mu.Lock()
			ok := cond()
			l.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
		}
	}

	if err := l.use(ctx, s); err != nil { // the statement in flight
		t.Fatal(err)
	}
	ticked := make(chan error, 1)
	go func() {
		_, err := l.TryLockTick(ctx, tickReq("b", now))
		ticked <- err
	}()
	waitFor("the tick batch queues for the session", func() bool { return s.busy == 2 })
	renewed := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		renewed <- l.Renew(rctx, ha)
	}()
	waitFor("the renewal queues for the session", func() bool { return len(s.urgent) == 1 })
	l.release(s)
	if err := <-renewed; err != nil {
		t.Errorf("Renew queued behind a tick batch = %v; want it served first, within its deadline", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-ticked; err != nil {
		t.Errorf("the tick batch, once the row was free = %v", err)
	}
}
