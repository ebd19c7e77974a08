package metrics

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
)

func TestReadyWithoutBackend(t *testing.T) {
	m := New(prometheus.NewRegistry(), build)
	if err := m.Ready(context.Background()); err != nil {
		t.Errorf("Ready with no backend = %v, want nil", err)
	}
}

func TestReadiness(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	m := New(prometheus.NewRegistry(), build, WithClock(clock.Now), WithReadyWindow(15*time.Second))
	mem := memory.New()
	f := &faulty{Locker: mem}
	l := InstrumentLocker(f, "redis", m)

	// Nothing answered yet: Ready asks the backend.
	if err := m.Ready(ctx); err != nil || f.pinged() != 1 {
		t.Fatalf("first Ready = %v after %d pings, want nil after 1", err, f.pinged())
	}
	// A fresh answer (an acquisition) is enough: no ping.
	h, err := l.TryLock(ctx, "k", time.Minute)
	if err != nil || h == nil {
		t.Fatalf("TryLock = %v, %v", h, err)
	}
	clock.Advance(10 * time.Second)
	if err := m.Ready(ctx); err != nil || f.pinged() != 1 {
		t.Errorf("Ready within the window = %v after %d pings, want nil and no new ping", err, f.pinged())
	}
	// Stale: Ready pings again.
	clock.Advance(10 * time.Second)
	if err := m.Ready(ctx); err != nil || f.pinged() != 2 {
		t.Errorf("Ready after the window = %v after %d pings, want nil after a second ping", err, f.pinged())
	}

	// The backend fails an operation and then a ping: not ready.
	f.fail(2)
	if _, err := l.TryLock(ctx, "k2", time.Minute); !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("TryLock with a fault = %v", err)
	}
	err = m.Ready(ctx)
	if !errors.Is(err, ErrNotReady) || !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("Ready while down = %v, want ErrNotReady wrapping ErrUnavailable", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, `"redis"`) || !strings.Contains(msg, "unavailable") || !strings.Contains(msg, "2026-11-30T06:00:20Z") {
		t.Errorf("not-ready message %q does not name the backend, the failure and the last answer", msg)
	}
	if strings.Contains(msg, "hunter2") || strings.Contains(msg, "redis://") {
		t.Errorf("not-ready message %q quotes the driver error", msg)
	}

	// Invalid input says nothing about the backend: still not ready...
	if _, err := l.TryLock(ctx, "", time.Minute); !errors.Is(err, locking.ErrInvalid) {
		t.Fatalf("TryLock of an empty key = %v", err)
	}
	f.fail(1)
	if err := m.Ready(ctx); !errors.Is(err, ErrNotReady) {
		t.Errorf("Ready after an invalid call = %v, want still not ready", err)
	}
	// ...while contention is an answer: ready again without a ping.
	if _, err := mem.Peer("other").TryLock(ctx, "k3", time.Minute); err != nil {
		t.Fatal(err)
	}
	if h, err := l.TryLock(ctx, "k3", time.Minute); h != nil || err != nil {
		t.Fatalf("TryLock of a held key = %v, %v", h, err)
	}
	pings := f.pinged()
	if err := m.Ready(ctx); err != nil || f.pinged() != pings {
		t.Errorf("Ready after contention = %v (%d new pings), want nil without a ping", err, f.pinged()-pings)
	}

	// Recovery through the ping alone.
	f.fail(1)
	if err := l.Renew(ctx, h); !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("Renew with a fault = %v", err)
	}
	if err := m.Ready(ctx); err != nil {
		t.Errorf("Ready once the backend answers pings again = %v, want nil", err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReadyPingIsBounded(t *testing.T) {
	m := New(prometheus.NewRegistry(), build)
	stuck := &stalling{Locker: memory.New()}
	InstrumentLocker(stuck, "pg", m)
	// The caller's deadline is shorter than DefaultPingTimeout: it wins, and
	// the stalled ping is reported as not answering in time.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := m.Ready(ctx)
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "did not answer in time") {
		t.Errorf("Ready against a stalled backend = %v", err)
	}
}

// stalling is a backend whose ping hangs until its context ends, like a
// TCP connection to a host that stopped answering.
type stalling struct{ *memory.Locker }

func (s *stalling) Ping(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// A refused permission reads as such on /readyz, not as an outage.
func TestNotReadySaysPermission(t *testing.T) {
	t.Parallel()
	err := &notReadyError{backend: "pg", cause: fmt.Errorf("locking/pg: %w: try-lock: denied", locking.ErrPermission)}
	if msg := err.Error(); !strings.Contains(msg, "refuses this node's user permission") || strings.Contains(msg, "unavailable") {
		t.Errorf("Error() = %q", msg)
	}
}
