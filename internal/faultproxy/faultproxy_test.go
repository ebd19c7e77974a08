package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echoServer answers every line with the same line; it stops when the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends line and reads the echo, failing after timeout.
func roundTrip(c net.Conn, r *bufio.Reader, line string, timeout time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func TestForwards(t *testing.T) {
	p := faultproxy.Start(t, echoServer(t))
	c, r := dial(t, p.Addr())
	for _, msg := range []string{"one", "two"} {
		got, err := roundTrip(c, r, msg, 2*time.Second)
		if err != nil || got != msg {
			t.Fatalf("round trip %q = %q, %v", msg, got, err)
		}
	}
}

func TestDelayAddsLatency(t *testing.T) {
	p := faultproxy.Start(t, echoServer(t))
	c, r := dial(t, p.Addr())
	const d = 50 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if got, err := roundTrip(c, r, "slow", 5*time.Second); err != nil || got != "slow" {
		t.Fatalf("round trip = %q, %v", got, err)
	}
	// The echo crosses the proxy twice, so at least 2d passed; a lower
	// bound, which a working Delay always meets and a no-op never does.
	if el := time.Since(start); el < 2*d {
		t.Fatalf("round trip took %v with Delay(%v) each way; want at least %v", el, d, 2*d)
	}
	p.Heal()
	if got, err := roundTrip(c, r, "fast", 2*time.Second); err != nil || got != "fast" {
		t.Fatalf("after Heal: round trip = %q, %v", got, err)
	}
}

func TestBlackholeStallsThenHealDelivers(t *testing.T) {
	p := faultproxy.Start(t, echoServer(t))
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "warm", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	_, err := roundTrip(c, r, "stalled", 100*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("blackholed round trip: err = %v, want a read timeout (the link stays open, silent)", err)
	}
	// A new connection is accepted but stalls too.
	c2, r2 := dial(t, p.Addr())
	if _, err := roundTrip(c2, r2, "new", 100*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("new connection while blackholed: err = %v, want a timeout", err)
	}
	p.Heal()
	// The held bytes arrive after Heal, on the same open connection.
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	got, err := r.ReadString('\n')
	if err != nil || got != "stalled\n" {
		t.Fatalf("after Heal: read %q, %v; want the held line", got, err)
	}
}

func TestCutDropsAndRefusesUntilHeal(t *testing.T) {
	p := faultproxy.Start(t, echoServer(t))
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "warm", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if _, err := roundTrip(c, r, "after cut", 2*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("existing connection after Cut: err = %v, want it closed (not a timeout)", err)
	}
	// A new connection is reset at once: the dial itself may see the reset,
	// or the first exchange does.
	if c2, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second); err == nil {
		defer c2.Close()
		if _, err := roundTrip(c2, bufio.NewReader(c2), "refused", 2*time.Second); err == nil || isTimeout(err) {
			t.Fatalf("new connection after Cut: err = %v, want it reset", err)
		}
	}
	p.Heal()
	c3, r3 := dial(t, p.Addr())
	if got, err := roundTrip(c3, r3, "back", 2*time.Second); err != nil || got != "back" {
		t.Fatalf("after Heal: round trip = %q, %v", got, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

// TestDelayRepliesDelaysOnlyTheTargetsBytes: the request reaches the
// target at once; its reply comes back at least d later.
func TestDelayRepliesDelaysOnlyTheTargetsBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	arrived := make(chan time.Time, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return
		}
		arrived <- time.Now()
		_, _ = io.WriteString(c, line)
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })

	p := faultproxy.Start(t, ln.Addr().String())
	const d = 300 * time.Millisecond
	p.DelayReplies(d)
	c, r := dial(t, p.Addr())
	start := time.Now()
	if got, err := roundTrip(c, r, "late", 5*time.Second); err != nil || got != "late" {
		t.Fatalf("round trip = %q, %v", got, err)
	}
	took := time.Since(start)
	at := <-arrived
	if in := at.Sub(start); in >= d {
		t.Errorf("the request reached the target after %v; DelayReplies(%v) must not delay it", in, d)
	}
	if took < d {
		t.Errorf("the reply came after %v; want at least %v", took, d)
	}
}
