package pg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

func TestLockRenewRelease(t *testing.T) {
	c := newCluster(t)
	a, b := c.open(Options{Holder: "node-a/1"}), c.open(Options{Holder: "node-b/2"})
	ctx := context.Background()

	h := mustLock(t, a, "job")
	mustContend(t, b, "job")
	if err := a.Renew(ctx, h); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	infos, err := b.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	want := []locking.LockInfo{{Key: "job", Fence: h.Fence(), Holder: "node-a/1"}}
	if len(infos) != 1 || infos[0] != want[0] {
		t.Fatalf("List = %+v, want %+v", infos, want)
	}
	if err := a.Release(ctx, h); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := a.Release(ctx, h); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("second Release = %v, want ErrLockLost", err)
	}
	if err := a.Renew(ctx, h); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("Renew after Release = %v, want ErrLockLost", err)
	}
	h2 := mustLock(t, b, "job")
	if h2.Fence() <= h.Fence() {
		t.Fatalf("fence went from %d to %d; want strictly increasing", h.Fence(), h2.Fence())
	}
	if infos, _ := a.List(ctx); len(infos) != 1 || infos[0].Holder != "node-b/2" {
		t.Fatalf("List after handover = %+v, want node-b/2 holding job", infos)
	}
	// The session went back to idle and is reused: the stale handle must not
	// act on the new acquisition even when it lands on the same session.
	if err := b.Release(ctx, h2); err != nil {
		t.Fatalf("Release: %v", err)
	}
	h3 := mustLock(t, a, "job")
	if err := a.Release(ctx, h); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("stale Release = %v, want ErrLockLost", err)
	}
	if err := a.Renew(ctx, h3); err != nil {
		t.Fatalf("the stale Release hurt the new holder: Renew = %v", err)
	}
}

func TestReentrantTryLockIsContended(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 2})
	h := mustLock(t, l, "k")
	// Both sessions would otherwise answer "yes": the holder's by
	// re-entrancy once it is idle; here it is pinned, so the second session
	// would be asked. Either way the Locker must say contended.
	mustContend(t, l, "k")
	if err := l.Release(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	h = mustLock(t, l, "k")
	mustContend(t, l, "k")
	if err := l.Release(context.Background(), h); err != nil {
		t.Fatal(err)
	}
}

func TestKilledSessionLosesLock(t *testing.T) {
	c := newCluster(t)
	a, b := c.open(Options{}), c.open(Options{})
	ctx := context.Background()
	h := mustLock(t, a, "k")
	c.kill("k")
	if err := a.Renew(ctx, h); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("Renew after the session was killed = %v, want ErrLockLost", err)
	}
	h2 := mustLock(t, b, "k") // at once: the lock died with the session
	if h2.Fence() <= h.Fence() {
		t.Fatalf("fence %d after %d; want strictly increasing", h2.Fence(), h.Fence())
	}
	if err := a.Release(ctx, h); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("Release of the lost handle = %v, want ErrLockLost", err)
	}
	// a recovers by itself: its dead sessions were closed, not reused.
	mustContend(t, a, "k")
	if err := b.Release(ctx, h2); err != nil {
		t.Fatal(err)
	}
	mustLock(t, a, "k")
}

// A handle abandoned after its session died (never renewed nor released)
// must not keep its own Locker answering "contended" forever.
func TestAbandonedLostHandle(t *testing.T) {
	c := newCluster(t)
	a := c.open(Options{})
	h := mustLock(t, a, "k")
	c.kill("k")
	h2 := mustLock(t, a, "k")
	if h2.Fence() <= h.Fence() {
		t.Fatalf("fence %d after %d; want strictly increasing", h2.Fence(), h.Fence())
	}
	if err := a.Renew(context.Background(), h); !errors.Is(err, locking.ErrLockLost) {
		t.Fatalf("Renew of the abandoned handle = %v, want ErrLockLost", err)
	}
	if err := a.Renew(context.Background(), h2); err != nil {
		t.Fatalf("the new handle: %v", err)
	}
}

func TestIdleSessionKilledIsReplaced(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 1})
	ctx := context.Background()
	h := mustLock(t, l, "k")
	if err := l.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	// Kill the now idle session, as a Postgres restart would.
	l.mu.Lock()
	pid := l.sessions[0].pid
	l.mu.Unlock()
	var done bool
	if err := c.admin.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, int32(pid)).Scan(&done); err != nil || !done {
		t.Fatalf("terminating %d: %v %v", pid, done, err)
	}
	h = mustLock(t, l, "k") // retried once on a fresh session
	if err := l.Ping(ctx); err != nil {
		t.Fatalf("Ping with every session pinned: %v", err)
	}
	if err := l.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
}

func TestUnreachable(t *testing.T) {
	// A port nothing listens on: bind one, then close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const opTimeout = 500 * time.Millisecond
	l, err := Open(context.Background(), Options{URL: "postgres://postgres:s3cret@" + addr + "/test?sslmode=disable", OpTimeout: opTimeout})
	if err != nil {
		t.Fatalf("Open must not need the server: %v", err)
	}
	defer l.Close(context.Background())
	start := time.Now()
	h, err := l.TryLock(context.Background(), "k", time.Minute)
	if took := time.Since(start); took >= 2*opTimeout {
		t.Errorf("TryLock took %v, want under %v", took, 2*opTimeout)
	}
	if h != nil || !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("TryLock = %v, %v; want ErrUnavailable", h, err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error shows the password: %v", err)
	}
	if err := l.Ping(context.Background()); !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("Ping = %v, want ErrUnavailable", err)
	}
	if _, err := l.List(context.Background()); !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("List = %v, want ErrUnavailable", err)
	}
}

func TestUnreachableBlackhole(t *testing.T) {
	// A listener that accepts and never answers: the connect must still be
	// bounded by OpTimeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	conns := make(chan net.Conn, 16)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	})
	defer func() {
		ln.Close()
		wg.Wait()
		close(conns)
		for c := range conns {
			c.Close()
		}
	}()
	const opTimeout = 300 * time.Millisecond
	l, err := Open(context.Background(), Options{URL: "postgres://postgres@" + ln.Addr().String() + "/test?sslmode=disable", OpTimeout: opTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	start := time.Now()
	_, err = l.TryLock(context.Background(), "k", time.Minute)
	if took := time.Since(start); took >= 2*opTimeout {
		t.Errorf("TryLock took %v, want under %v", took, 2*opTimeout)
	}
	if !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("TryLock = %v, want ErrUnavailable", err)
	}
}

// TestSessionsShared: MaxSessions bounds connections, not locks: three
// sessions hold many locks, re-entrant asks for held keys stay contended
// (never answered yes by the holding session), and Ping and List share
// the sessions.
func TestSessionsShared(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 3})
	ctx := context.Background()
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if h, err := l.TryLock(ctx, fmt.Sprintf("k%d", i), time.Minute); h == nil || err != nil {
				t.Errorf("TryLock(k%d) = %v, %v", i, h, err)
			}
		})
	}
	wg.Wait()
	if pids := l.sessionPIDs(); len(pids) > 3 {
		t.Fatalf("%d sessions open (%v), want at most 3", len(pids), pids)
	}
	for i := range n {
		mustContend(t, l, fmt.Sprintf("k%d", i))
	}
	if err := l.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if infos, err := l.List(ctx); err != nil || len(infos) != n {
		t.Fatalf("List = %d locks, %v; want %d", len(infos), err, n)
	}
}

func TestRace(t *testing.T) {
	for _, lockers := range []int{1, 4} {
		t.Run(map[int]string{1: "one_locker", 4: "four_lockers"}[lockers], func(t *testing.T) {
			c := newCluster(t)
			ls := make([]*Locker, lockers)
			for i := range ls {
				ls[i] = c.open(Options{MaxSessions: 100 / lockers / 2})
			}
			const n = 100
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				handles []*locking.Handle
				owner   []*Locker
				errs    []error
			)
			start := make(chan struct{})
			for i := range n {
				l := ls[i%lockers]
				wg.Go(func() {
					<-start
					h, err := l.TryLock(context.Background(), "hot", time.Minute)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
					}
					if h != nil {
						handles = append(handles, h)
						owner = append(owner, l)
					}
				})
			}
			close(start)
			wg.Wait()
			if len(errs) > 0 || len(handles) != 1 {
				t.Fatalf("%d goroutines: %d handles, errors %v; want exactly one handle, no errors", n, len(handles), errs)
			}
			// The holder's own second TryLock is contended too.
			mustContend(t, owner[0], "hot")
			if err := owner[0].Release(context.Background(), handles[0]); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	c := newCluster(t)
	a, b := c.open(Options{}), c.open(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	h := mustLock(t, a, "x")
	mustLock(t, a, "y")
	pids := a.sessionPIDs()
	if len(pids) != 1 {
		t.Fatalf("a has sessions %v, want 1 (its two locks share it)", pids)
	}
	cancel() // Close must work with a cancelled context
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	mustLock(t, b, "x")
	mustLock(t, b, "y")
	bg := context.Background()
	if _, err := a.TryLock(bg, "z", time.Minute); !errors.Is(err, locking.ErrClosed) {
		t.Errorf("TryLock after Close = %v, want ErrClosed", err)
	}
	if err := a.Renew(bg, h); !errors.Is(err, locking.ErrClosed) {
		t.Errorf("Renew after Close = %v, want ErrClosed", err)
	}
	if err := a.Release(bg, h); !errors.Is(err, locking.ErrClosed) {
		t.Errorf("Release after Close = %v, want ErrClosed", err)
	}
	if err := a.Ping(bg); !errors.Is(err, locking.ErrClosed) {
		t.Errorf("Ping after Close = %v, want ErrClosed", err)
	}
	if _, err := a.List(bg); !errors.Is(err, locking.ErrClosed) {
		t.Errorf("List after Close = %v, want ErrClosed", err)
	}
	if err := a.Close(bg); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	var n int
	if err := c.admin.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d of a's sessions %v still open after Close", n, pids)
	}
}

// sessionPIDs lists the backends of l's open sessions.
func (l *Locker) sessionPIDs() []int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var pids []int32
	for _, s := range l.sessions {
		pids = append(pids, int32(s.pid))
	}
	return pids
}

func TestBadHandles(t *testing.T) {
	c := newCluster(t)
	a, b := c.open(Options{}), c.open(Options{})
	ctx := context.Background()
	h := mustLock(t, a, "k")
	foreign := locking.NewHandle(b, "k", "tok", 1, time.Minute, "not a lease")
	for name, err := range map[string]error{
		"Renew(nil)":          a.Renew(ctx, nil),
		"Release(nil)":        a.Release(ctx, nil),
		"Renew(b's handle)":   b.Renew(ctx, h),
		"Release(b's handle)": b.Release(ctx, h),
		"Renew(odd state)":    b.Renew(ctx, foreign),
		"Release(odd state)":  b.Release(ctx, foreign),
	} {
		if !errors.Is(err, locking.ErrInvalid) {
			t.Errorf("%s = %v, want ErrInvalid", name, err)
		}
	}
	for _, bad := range []string{"", "a\nb", strings.Repeat("x", locking.MaxKeyLen+1)} {
		if _, err := a.TryLock(ctx, bad, time.Minute); !errors.Is(err, locking.ErrInvalid) {
			t.Errorf("TryLock(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := a.TryLock(ctx, "k2", 0); !errors.Is(err, locking.ErrInvalid) {
		t.Errorf("TryLock with ttl 0 = %v, want ErrInvalid", err)
	}
	if err := a.Renew(ctx, h); err != nil {
		t.Errorf("a's own handle after the bad calls: %v", err)
	}
}
