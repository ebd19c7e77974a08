package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestMaxConnections: with every slot held by an idle connection, a
// request waits (in the kernel's queue, costing the process no descriptor)
// and is served as soon as one of them closes; Shutdown does not wait for
// a slot.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	s := New("127.0.0.1:0", nil, nil, slog.New(slog.DiscardHandler), WithMaxConnections(2))
	base := start(t, s)
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	type answer struct {
		code int
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := client.Get(base + "/healthz")
		if err != nil {
			got <- answer{0, err}
			return
		}
		resp.Body.Close()
		got <- answer{resp.StatusCode, nil}
	}()
	// A negative: nothing tells us a request has not been served, so the
	// test gives it a while. Without the cap it is served in milliseconds.
	select {
	case a := <-got:
		t.Fatalf("/healthz answered %d while both slots were held by idle connections", a.code)
	case <-time.After(300 * time.Millisecond):
	}
	idle[0].Close()
	select {
	case a := <-got:
		if a.err != nil || a.code != 200 {
			t.Fatalf("/healthz: %d %v", a.code, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("/healthz not served 10s after a slot was freed")
	}
}

// TestMaxConnectionsShutdown: Shutdown returns while Accept waits for a
// slot (goleak checks its goroutine is gone). The idle connection holding
// the slot outlives the grace (net/http waits 5s for a connection that
// never sent a request), so Shutdown ends it and says so.
func TestMaxConnectionsShutdown(t *testing.T) {
	t.Parallel()
	s := New("127.0.0.1:0", nil, nil, slog.New(slog.DiscardHandler), WithMaxConnections(1))
	// Told when the server has accepted the connection: a Shutdown before
	// that finds nothing to wait for and returns nil at once (seen on a
	// loaded CI machine), which is not the case under test.
	accepted := make(chan struct{}, 1)
	s.srv.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not accept the connection within 10s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown with every slot taken: %v, want the grace's end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown still waits 10s after its grace ended")
	}
}
