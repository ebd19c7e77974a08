package pg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// forEach runs fn(i) for i in [0, n) on 64 goroutines.
func forEach(n int, fn func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// TestTenThousandLocksSixteenSessions: 10,000 locks held at once by one
// Locker over at most 16 connections (counted by the server, by
// application_name); a session killed on the server loses exactly its own
// locks, each reported lost to its holder, and none is taken again
// behind its holder's back; the others keep theirs.
func TestTenThousandLocksSixteenSessions(t *testing.T) {
	const n, maxSessions = 10000, 16
	c := newCluster(t)
	app := "bext_" + c.ns
	sep := "?"
	if strings.Contains(c.url, "?") {
		sep = "&"
	}
	l := c.open(Options{URL: c.url + sep + "application_name=" + app, MaxSessions: maxSessions})
	ctx := context.Background()
	conns := func() int {
		t.Helper()
		var k int
		if err := c.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}

	handles := make([]*locking.Handle, n)
	start := time.Now()
	forEach(n, func(i int) {
		h, err := l.TryLock(ctx, fmt.Sprintf("k%05d", i), time.Minute)
		if err != nil || h == nil {
			t.Errorf("TryLock(k%05d) = %v, %v", i, h, err)
		}
		handles[i] = h
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d TryLocks on 64 goroutines: %v", n, time.Since(start))
	if k := conns(); k == 0 || k > maxSessions {
		t.Fatalf("%d connections hold %d locks; want 1 to %d", k, n, maxSessions)
	}
	var held int
	if err := c.admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1`, app).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != n {
		t.Fatalf("the server shows %d advisory locks on our sessions, want %d", held, n)
	}

	renewAll := func() []error {
		errs := make([]error, n)
		forEach(n, func(i int) { errs[i] = l.Renew(ctx, handles[i]) })
		return errs
	}
	start = time.Now()
	for i, err := range renewAll() {
		if err != nil {
			t.Fatalf("Renew(k%05d) = %v", i, err)
		}
	}
	t.Logf("%d Renews on 64 goroutines: %v", n, time.Since(start))
	// pg_locks costs what the server's whole lock table costs: read once
	// per session per renewAudit, not once per round.
	l.mu.Lock()
	var audits int64
	for _, s := range l.sessions {
		audits += s.audits.Load()
	}
	sessions := len(l.sessions)
	l.mu.Unlock()
	if audits > int64(sessions) {
		t.Errorf("renew rounds read pg_locks %d times on %d sessions within a few seconds; want at most once each", audits, sessions)
	}
	start = time.Now()
	if err := l.Renew(ctx, handles[0]); err != nil {
		t.Fatal(err)
	}
	t.Logf("one Renew alone, %d locks held: %v", n, time.Since(start))

	// Kill the session of key 0 on the server.
	victim := h2lease(t, l, handles[0]).sess.pid
	mine := make([]bool, n)
	var lost int
	for i, h := range handles {
		if h2lease(t, l, h).sess.pid == victim {
			mine[i] = true
			lost++
		}
	}
	var done bool
	if err := c.admin.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, int32(victim)).Scan(&done); err != nil || !done {
		t.Fatalf("terminating %d: %v %v", victim, done, err)
	}
	t.Logf("killed backend %d holding %d of %d locks", victim, lost, n)
	for i, err := range renewAll() {
		switch {
		case mine[i] && !errors.Is(err, locking.ErrLockLost):
			t.Errorf("Renew(k%05d) on the killed session = %v, want ErrLockLost", i, err)
		case !mine[i] && err != nil:
			t.Errorf("Renew(k%05d) on a live session = %v, want nil", i, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// Nothing took the lost locks back: the server shows n - lost.
	if err := c.admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1`, app).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != n-lost {
		t.Fatalf("after the kill the server shows %d locks on our sessions, want %d", held, n-lost)
	}
	// A lost key is free for anyone, this Locker included (on a live session).
	for i := range n {
		if mine[i] {
			h := mustLock(t, l, fmt.Sprintf("k%05d", i))
			if h.Fence() <= handles[i].Fence() {
				t.Errorf("fence %d after %d", h.Fence(), handles[i].Fence())
			}
			if err := l.Release(ctx, h); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	forEach(n, func(i int) {
		err := l.Release(ctx, handles[i])
		switch {
		case mine[i] && !errors.Is(err, locking.ErrLockLost):
			t.Errorf("Release(k%05d) on the killed session = %v, want ErrLockLost", i, err)
		case !mine[i] && err != nil:
			t.Errorf("Release(k%05d) = %v", i, err)
		}
	})
	if k := conns(); k > maxSessions {
		t.Errorf("%d connections after the kill, want at most %d", k, maxSessions)
	}
}

// TestRenewsShareAStatement: renewals of many locks of one session that
// come at once are answered by far fewer statements than locks.
func TestRenewsShareAStatement(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{MaxSessions: 1})
	const n = 200
	hs := make([]*locking.Handle, n)
	for i := range hs {
		hs[i] = mustLock(t, l, fmt.Sprintf("k%d", i))
	}
	s := h2lease(t, l, hs[0]).sess
	// Hold the session's slot so every Renew queues into one round.
	s.sem <- struct{}{}
	errs := make(chan error, n)
	for _, h := range hs {
		go func() { errs <- l.Renew(context.Background(), h) }()
	}
	for {
		s.rmu.Lock()
		joined := 0
		if s.round != nil {
			joined = s.round.joined
		}
		s.rmu.Unlock()
		if joined == n-1 {
			break // every Renew waits on one round
		}
		time.Sleep(time.Millisecond)
	}
	before := s.rounds.Load()
	<-s.sem
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := s.rounds.Load() - before; got != 1 {
		t.Errorf("%d renew statements answered %d Renews of one session, want 1", got, n)
	}
}
