package pg

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/locking"
)

// TestTimedOutStatementKeepsOthersLeases: two callers share a session
// (MaxSessions 1). One holds "held", renewed just now: by MaxLease its
// scheduler counts on it until the renewal's send time + MaxLease. Another
// caller's statement on that session does not answer within OpTimeout
// (slow on the server, or its reply stalled on the network). The session
// must be given up, but not ended before the holder's lease has: another
// node must not be granted "held" before then unless the holder was told
// the lock is lost. pgx ends the session of a statement that timed out
// (a cancel request, then Terminate and close), and so the server freed
// "held" at once: another node took it while its holder still ran (the
// real-time simulation with -pgdrop all, seed 14: two runs of an
// overlap=skip schedule overlapped by 0.7s).
func TestTimedOutStatementKeepsOthersLeases(t *testing.T) {
	for _, fault := range []string{"slow statement", "stalled reply"} {
		t.Run(fault, func(t *testing.T) {
			c := newCluster(t)
			p, u := c.proxied()
			a := c.open(Options{URL: u, MaxSessions: 1, OpTimeout: time.Second})
			b := c.open(Options{})
			ctx := context.Background()
			h := mustLock(t, a, "held")
			renewed := time.Now()
			if err := a.Renew(ctx, h); err != nil {
				t.Fatal(err)
			}
			leaseEnd := renewed.Add(a.MaxLease())

			stmt := "SELECT pg_sleep(30)"
			if fault == "stalled reply" {
				stmt = "SELECT 1"
				p.Blackhole()
			}
			err := a.withSession(ctx, func(ctx context.Context, conn *pgx.Conn) error {
				_, err := conn.Exec(ctx, stmt)
				return err
			})
			if err == nil {
				t.Fatal("the statement answered within OpTimeout")
			}
			p.Heal() // whatever the client sends to end the session gets through

			// Until the holder's lease ends, nobody else gets its key; the
			// holder has not been told anything.
			for time.Until(leaseEnd) > 100*time.Millisecond {
				h2, err := b.TryLock(ctx, "held", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if h2 != nil {
					t.Fatalf("another node was granted %q %v before its holder's lease ends (renewed %v ago, MaxLease %v), its holder never told",
						"held", time.Until(leaseEnd), time.Since(renewed).Round(time.Millisecond), a.MaxLease())
				}
				time.Sleep(20 * time.Millisecond) // the server tells nobody when a lock is freed
			}
			// The holder is told at its next renewal, at once.
			start := time.Now()
			if err := a.Renew(ctx, h); !errors.Is(err, locking.ErrLockLost) {
				t.Errorf("Renew on the given-up session = %v; want ErrLockLost", err)
			}
			if took := time.Since(start); took > 100*time.Millisecond {
				t.Errorf("Renew on the given-up session took %v; want an answer at once", took)
			}
			// And the lock is freed for others after the lease.
			waitFree(t, b, "held")
			// a works on a new session.
			h3 := mustLock(t, a, "other")
			if err := a.Release(ctx, h3); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCloseEndsAbandonedSessions: Close ends a session given up while
// it still held locks at once, without waiting for MaxLease: its holders
// are done with the Locker too. A session given up holding none (its
// failed statement's own lock, if any, has no holder) ends at once.
func TestCloseEndsAbandonedSessions(t *testing.T) {
	c := newCluster(t)
	a := c.open(Options{MaxSessions: 1, OpTimeout: time.Second})
	b := c.open(Options{})
	ctx := context.Background()
	mustLock(t, a, "held")
	if err := a.withSession(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SELECT pg_sleep(30)")
		return err
	}); err == nil {
		t.Fatal("the statement answered within OpTimeout")
	}
	a.mu.Lock()
	n := len(a.abandoned)
	a.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d sessions abandoned, want 1", n)
	}
	mustContend(t, b, "held")
	start := time.Now()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFree(t, b, "held")
	if took := time.Since(start); took >= a.MaxLease() {
		t.Errorf("the abandoned session's lock was freed %v after Close; want at once, not after MaxLease %v", took, a.MaxLease())
	}

	// Given up holding nothing: closed at once.
	l := c.open(Options{MaxSessions: 1, OpTimeout: time.Second})
	h := mustLock(t, l, "x")
	if err := l.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := l.withSession(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SELECT pg_try_advisory_lock(42, 42), pg_sleep(30)")
		return err
	}); err == nil {
		t.Fatal("the statement answered within OpTimeout")
	}
	l.mu.Lock()
	n = len(l.abandoned)
	l.mu.Unlock()
	if n != 0 {
		t.Errorf("a session given up holding no lock is kept open (%d abandoned)", n)
	}
}
