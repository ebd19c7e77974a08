package pg

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// watching runs l.WatchTicks until the test ends, sending what it hears
// to the returned channel and a signal for each (re)subscription to the
// other; the cleanup checks WatchTicks returned nil.
func watching(t *testing.T, l *Locker) (heard chan locking.TickMark, listening chan struct{}) {
	t.Helper()
	heard = make(chan locking.TickMark, 64)
	listening = make(chan struct{}, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- l.WatchTicks(ctx, locking.TickWatch{
			Mark: func(m locking.TickMark) { heard <- m },
			Listening: func() {
				select {
				case listening <- struct{}{}:
				default:
				}
			},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchTicks: %v", err)
		}
	})
	return heard, listening
}

func waitListening(t *testing.T, listening chan struct{}) {
	t.Helper()
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		t.Fatal("never listening")
	}
}

func expectMark(t *testing.T, heard chan locking.TickMark, key string, tick time.Time) {
	t.Helper()
	select {
	case m := <-heard:
		if m.Key != key || !m.Tick.Equal(tick) {
			t.Fatalf("heard %q at %v, want %q at %v", m.Key, m.Tick, key, tick)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("never heard %q at %v", key, tick)
	}
}

func expectSilence(t *testing.T, heard chan locking.TickMark) {
	t.Helper()
	select {
	case m := <-heard:
		t.Fatalf("heard %q at %v: nothing else was raised", m.Key, m.Tick)
	default:
	}
}

// Two nodes of one cluster (one namespace) and one of another on one real
// Postgres: a watch hears the marks its own cluster raises (granted,
// paused, missed), with the key and T to the microsecond, and nothing of a
// done or contended answer, nor of a resent call, nor of the other
// cluster. Notifications are delivered in commit order, so a mark that
// was not told would show as the next one heard being the wrong one.
func TestWatchTicksHearsRaisedMarksOfItsCluster(t *testing.T) {
	c := newCluster(t)
	a := c.open(Options{})
	b := c.open(Options{})
	other := newCluster(t).open(Options{})
	heard, listening := watching(t, b)
	waitListening(t, listening)

	ctx := context.Background()
	now := c.dbNow().Truncate(time.Second).Add(123456 * time.Microsecond)
	// Granted: heard. The same tick again (done) and the next while the
	// lock is held (contended): not heard.
	mustTick(t, other, tickReq("sched one", now), locking.TickGranted, "other cluster")
	req := tickReq("sched one", now)
	req.Token = "resent"
	ans := mustTick(t, a, req, locking.TickGranted, "granted")
	expectMark(t, heard, "sched one", now)
	mustTick(t, a, tickReq("sched one", now), locking.TickDone, "done")
	mustTick(t, a, tickReq("sched one", now.Add(time.Millisecond)), locking.TickContended, "contended")
	// A resent call, answered by Postgres from its row once the first
	// call's session is gone (b: a does not ask, it holds the lease):
	// granted, and not told again.
	c.kill("sched one")
	if ans2 := mustTick(t, b, req, locking.TickGranted, "resent"); ans2.Handle.Fence() != ans.Handle.Fence() {
		t.Fatalf("resent call's fence %d, want the first call's %d", ans2.Handle.Fence(), ans.Handle.Fence())
	} else if err := b.Release(ctx, ans2.Handle); err != nil {
		t.Fatal(err)
	}
	// Paused: heard.
	if err := a.SetPause(ctx, "paused", locking.Pause{Paused: true}); err != nil {
		t.Fatal(err)
	}
	mustTick(t, a, tickReq("paused", now), locking.TickPaused, "paused")
	expectMark(t, heard, "paused", now)
	// Missed: heard.
	first := now.Add(-testSkew / 2)
	mustTick(t, a, tickReq("late", first), locking.TickGranted, "late, granted")
	expectMark(t, heard, "late", first)
	late := tickReq("late", first.Add(testSkew/4))
	late.MaxSkew, late.Window = time.Millisecond, 0
	mustTick(t, b, late, locking.TickMissed, "missed")
	expectMark(t, heard, "late", late.Tick)
	expectSilence(t, heard)
}

// TestWatchTicksReconnects: the listening connection is ended under the
// watch (an operator's pg_terminate_backend, a restart): it connects
// again, says so with Listening, and hears the marks raised from then on.
func TestWatchTicksReconnects(t *testing.T) {
	c := newCluster(t)
	a := c.open(Options{})
	b := c.open(Options{})
	heard, listening := watching(t, b)
	waitListening(t, listening)
	now := c.dbNow().Truncate(time.Second)
	ans := mustTick(t, a, tickReq("before", now), locking.TickGranted, "before")
	expectMark(t, heard, "before", now)
	if err := a.Release(context.Background(), ans.Handle); err != nil {
		t.Fatal(err)
	}

	var ended int
	if err := c.admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid, 10000))::int FROM pg_stat_activity
WHERE query = 'LISTEN "' || $1 || '"' AND datname = current_database()`, b.channel).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	if ended != 1 {
		t.Fatalf("ended %d listening backends, want 1", ended)
	}
	waitListening(t, listening)
	mustTick(t, a, tickReq("after", now), locking.TickGranted, "after")
	expectMark(t, heard, "after", now)
	expectSilence(t, heard)
}

// TestWatchTicksThroughSessionPool: behind a real PgBouncer in session
// mode the watch keeps its server connection and hears marks as direct.
func TestWatchTicksThroughSessionPool(t *testing.T) {
	c := newCluster(t)
	bouncer := testenv.StartPgBouncer(t, "session", 4)
	a := c.open(Options{URL: bouncer.URL(), OpTimeout: 3 * time.Second})
	b := c.open(Options{URL: bouncer.URL(), OpTimeout: 3 * time.Second})
	heard, listening := watching(t, b)
	waitListening(t, listening)
	now := c.dbNow().Truncate(time.Second)
	mustTick(t, a, tickReq("k", now), locking.TickGranted, "through a session pool")
	expectMark(t, heard, "k", now)
}

// TestWatchTicksRefusesTransactionPool: behind a transaction-pooling
// PgBouncer a LISTEN would be left on a server connection other clients
// get: WatchTicks refuses, with ErrTransactionPooler, as the lock calls do.
func TestWatchTicksRefusesTransactionPool(t *testing.T) {
	c := newCluster(t)
	bouncer := testenv.StartPgBouncer(t, "transaction", 1)
	l := c.open(Options{URL: bouncer.URL(), OpTimeout: 3 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := l.WatchTicks(ctx, locking.TickWatch{Listening: func() { t.Error("listening through a transaction pool") }})
	if !errors.Is(err, ErrTransactionPooler) {
		t.Fatalf("WatchTicks through a transaction pool = %v; want ErrTransactionPooler", err)
	}
}

// TestWatchTicksEndsWithClose: Close ends a watch (nil), and a watch on a
// closed Locker is refused with ErrClosed.
func TestWatchTicksEndsWithClose(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	listening := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- l.WatchTicks(context.Background(), locking.TickWatch{Listening: func() { listening <- struct{}{} }})
	}()
	waitListening(t, listening)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WatchTicks after Close = %v, want nil", err)
	}
	if err := l.WatchTicks(context.Background(), locking.TickWatch{}); !errors.Is(err, locking.ErrClosed) {
		t.Fatalf("WatchTicks on a closed Locker = %v, want ErrClosed", err)
	}
}
