package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking/pg"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The lease deadline is a timer of the run's watch: a renewal that hangs
// (a stalled link, a backend that ignores its caller's deadline) does not
// keep the job running past it. The job's context ends when the deadline
// passes on the scheduler's clock, with the lease's cause, whatever the
// renewal in flight is doing.
func TestLeaseDeadlineCancelsDuringAHungRenewal(t *testing.T) {
	for _, mode := range []string{"until its context ends", "ignoring its context"} {
		t.Run(mode, func(t *testing.T) {
			job := newBlockingJob()
			s := sched("l", everyMinute, hints.RequireGlobal, job)
			s.ExpectedRuntime = time.Hour
			// TTL 1h5s minus the 5s margin: a lease of 1h, renewed every 20m.
			h := newHarness(t, scheduler.Options{SafetyMargin: 5 * time.Second}, s)
			unblock := make(chan struct{})
			var once sync.Once
			release := func() { once.Do(func() { close(unblock) }) }
			renewing := make(chan struct{}, 16)
			h.locker.renewErr = func(ctx context.Context) error {
				renewing <- struct{}{}
				if mode == "ignoring its context" {
					<-unblock
					return errors.New("test: renewal answered at last")
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-unblock:
					return errors.New("test: renewal answered at last")
				}
			}
			h.start()
			t.Cleanup(release) // runs before the harness stops
			h.clock.Advance(time.Minute)
			job.waitStarted(t)
			h.clock.Advance(20 * time.Minute) // the first renewal: it hangs
			select {
			case <-renewing:
			case <-time.After(waitTimeout):
				t.Fatal("no renewal was sent")
			}
			h.clock.Advance(40 * time.Minute) // the lease deadline
			cause := job.waitEnded(t)
			if !errors.Is(cause, scheduler.ErrLeaseExpired) {
				t.Fatalf("job's context ended with cause %v, want the lease deadline", cause)
			}
			release()
			if r := h.rec.waitRuns(t, 1); r[0].result != scheduler.ResultLockLost {
				t.Errorf("result %q, want lock_lost", r[0].result)
			}
		})
	}
}

// leaseJob records when it started and when and why its context ended.
type leaseJob struct {
	started chan time.Time
	ended   chan leaseEnd
}

type leaseEnd struct {
	at    time.Time
	cause error
}

func (j *leaseJob) Run(ctx context.Context, _ scheduler.Tick) error {
	select {
	case j.started <- time.Now():
	default: // a later tick: only the first run is watched
	}
	<-ctx.Done()
	select {
	case j.ended <- leaseEnd{time.Now(), context.Cause(ctx)}:
	default:
	}
	return ctx.Err()
}

// On real Postgres behind a stalled link (the defaults: OpTimeout 5s, so
// the server drops a silent session after MaxLease 8s; margin 5s), the
// job is cancelled by its lease deadline, min(TTL, MaxLease) - margin =
// 3s after its lock was taken (by the deadline itself, or sooner by the
// renewal that gave up at its own deadline), while the server still holds
// the lock for it: never two holders. A renewal bounded by OpTimeout alone
// answered after 6s, and the job ran on until then.
func TestLeaseDeadlineOnAStalledPostgresLink(t *testing.T) {
	pgURL := testenv.PGURL(t)
	ns := testenv.UniqueName(t)
	u, err := url.Parse(pgURL)
	if err != nil || u.Host == "" {
		t.Skipf("needs a postgres:// URL with a TCP host, got %q", pgURL)
	}
	proxy := faultproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	open := func(url string) *pg.Locker {
		l, err := pg.Open(context.Background(), pg.Options{URL: url, Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		return l
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, pgURL)
		if err != nil {
			t.Logf("cleaning fence rows: %v", err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, `DELETE FROM bext_lock_fences WHERE namespace = $1`, ns); err != nil {
			t.Logf("cleaning fence rows: %v", err)
		}
	})
	direct := open(pgURL)
	stalled := open(u.String())
	const margin = scheduler.DefaultSafetyMargin
	lease := min(stalled.MaxLease(), time.Minute+margin) - margin
	if lease <= 0 || lease >= stalled.MaxLease() {
		t.Fatalf("lease %v with MaxLease %v: the test's premise is off", lease, stalled.MaxLease())
	}

	job := &leaseJob{started: make(chan time.Time, 1), ended: make(chan leaseEnd, 1)}
	s := sched("pglease", everySecond, hints.RequireGlobal, job)
	s.ExpectedRuntime = time.Minute
	sc, err := scheduler.New(scheduler.Options{NodeID: "n", Locker: stalled, Backend: hints.Distributed,
		Observer: newRecorder()}, []scheduler.Schedule{s})
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, sc)
	defer stop()
	defer proxy.Heal()

	var started time.Time
	select {
	case started = <-job.started:
	case <-time.After(waitTimeout):
		t.Fatal("the job never started")
	}
	proxy.Blackhole()
	var end leaseEnd
	select {
	case end = <-job.ended:
	case <-time.After(waitTimeout):
		t.Fatal("the job was never cancelled")
	}
	took := end.at.Sub(started)
	t.Logf("cancelled %v after the job started (lease %v, MaxLease %v): %v", took, lease, stalled.MaxLease(), end.cause)
	if !errors.Is(end.cause, scheduler.ErrLockLost) {
		t.Errorf("job cancelled with cause %v, want its lock lost (a failed renewal or its lease deadline)", end.cause)
	}
	if slack := 700 * time.Millisecond; took > lease+slack {
		t.Errorf("job cancelled %v after it started, past its lease of %v (+%v)", took, lease, slack)
	}
	// The server has not freed the lock yet: the job ended while its lock
	// was still ours, so no other node could have run the schedule.
	locks, err := direct.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	held := false
	for _, li := range locks {
		held = held || li.Key == "pglease"
	}
	if !held {
		t.Errorf("the server had freed the lock by the time the job was cancelled (locks %v)", fmt.Sprint(locks))
	}
}
