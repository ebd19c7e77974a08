// Package clustertest is the conformance suite every cluster.Store passes
// (memory, Redis, Postgres), so that "implements the cluster state" means
// the same thing on all of them. A backend's tests call Run with a Backend
// describing how to build stores; the suite never skips a case: what a
// backend lacks (an injected clock) is made up for with real time.
//
// Beyond the comments of cluster.Store, the suite pins down:
//
//   - bad input wraps cluster.ErrInvalid (cluster's Check functions say
//     what is bad: empty ids, keep or limit below 1, a request without an
//     id or a tick, a TTL below locking.MinTTL), and a batch with one bad
//     item stores nothing;
//   - RecordRuns stores cluster.Bound of each run, and times and durations
//     of microsecond precision come back exactly (compared with Equal);
//   - Runs and Requests of an unknown schedule are empty, not an error;
//     Leave of an unknown node and Done of a request no longer queued are
//     no-ops;
//   - TakeRequest on a held lock answers Contended with the queue's head
//     in Request (and no Handle); on an empty queue the zero Taken;
//   - a take resent with its Token (its reply "lost": the same take sent
//     twice) is answered from the first (cluster.Store.TakeRequest's rules
//     of a resent take), on a lock ended meanwhile too; the cases end a
//     lock as a vanished holder would (Backend.EndLock: a Postgres lock has
//     no TTL to expire), since a Release, or a renewal, is its taker's word
//     that it heard the take;
//   - a trigger whose take's lock ended without that word goes back to
//     the head of its queue (its schedule in Queued meanwhile), and the
//     next take of the free lock takes it; one whose taker renewed or
//     released the lock does not, and a take carrying that take's token
//     (a late copy) takes nothing and leaves its record to GiveBack;
//   - Done removes its backfill tick wherever it is in the queue (a
//     trigger put back at the head while it ran does not keep it queued)
//     and nothing else (a second Done of it leaves the next tick alone);
//   - an Enqueue refused with ErrBusy stores none of its requests;
//   - a cancelled context makes every method fail.
//
// Benchmark measures what recording and reading history costs.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/locking"
)

// Backend describes a backend under test.
type Backend struct {
	// New returns a fresh Store: a new node. Stores made by calls within
	// one test share one namespace, like nodes of one cluster; stores of
	// different tests never see each other's state (runs, nodes, requests,
	// locks). Required. A store that has a Close(context.Context) error
	// method is closed when the test ends.
	New func(t testing.TB) cluster.Store

	// NewOtherCluster returns a Store on the same server as New's, in
	// another namespace (Redis key_prefix, Postgres namespace): nothing is
	// shared with the stores of New. Required.
	NewOtherCluster func(t testing.TB) cluster.Store

	// Locker returns the locking.Locker that shares s's lock table, so
	// that TakeRequest and TryLock exclude each other on a schedule id, and
	// that accepts (Renew, Release) the handles s's TakeRequest returns
	// (Postgres: the same sessions). It must also implement
	// locking.TickLocker. nil means s itself is that Locker (the store is
	// the lock backend's Locker, as in locking/memory).
	Locker func(t testing.TB, s cluster.Store) locking.Locker

	// Now reads the store's clock, the one Announce sets LastSeen from and
	// node TTLs run on (Redis TIME, Postgres clock_timestamp(), memory's
	// injected clock). nil means time.Now (a server on this machine).
	Now func() time.Time

	// Advance, when set, moves the store's clock forward by d (memory's
	// injected clock). When nil the cases about node expiry let real time
	// pass with short TTLs.
	Advance func(d time.Duration)

	// EndLock ends schedule's lock in the cluster of st (a store of New)
	// the way a holder that vanished would, without a word from it: its
	// TTL passes (memory, Redis), its session is gone (Postgres).
	// Required: the cases of a take never heard back need it.
	EndLock func(t testing.TB, st cluster.Store, schedule string)

	// Parallel runs the cases at once (t.Parallel): for a backend whose
	// cases share nothing, the time, state and hooks above included, so
	// that the cases waiting on real time (a TTL, an expiry) wait together.
	// A backend on an injected clock that one case advances for all, as
	// memory's is, leaves it false.
	Parallel bool
}

// Run runs the whole conformance suite against b, each case as a subtest
// with its own stores.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if b.New == nil || b.NewOtherCluster == nil {
		t.Fatal("clustertest: Backend.New and Backend.NewOtherCluster are required")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if b.Parallel {
				t.Parallel()
			}
			c.run(&suite{t: t, b: b, ctx: t.Context()})
		})
	}
}

type testCase struct {
	name string
	run  func(s *suite)
}

// cases is the suite, in the order the contract reads.
var cases = []testCase{
	{"Runs/NewestFirstAcrossNodes", caseRunsOrder},
	{"Runs/Limit", caseRunsLimit},
	{"Runs/KeepTrims", caseKeep},
	{"Runs/KeepTrimsOneBigBatch", caseKeepBatch},
	{"Runs/Bound", caseBound},
	{"Runs/AllFieldsRoundTrip", caseRunFields},
	{"Runs/JSON", caseRunJSON},
	{"Runs/UnstartedReplacedByRealRun", caseRunUnstartedReplaced},
	{"Runs/RunningReplacedByFinal", caseRunRunningReplaced},
	{"Runs/AnomalyAndBy", caseRunAnomalyAndBy},
	{"LastRuns", caseLastRuns},
	{"Skips/NewestFirstOnePerTick", caseSkipsOrderOnePerTick},
	{"Skips/KeepTrimsApartFromRuns", caseSkipsKeep},
	{"Skips/AllFieldsRoundTrip", caseSkipFields},
	{"Nodes/AnnounceSortedAndSchedules", caseNodes},
	{"Nodes/ReadyClockOffsetRunning", caseNodeState},
	{"Nodes/Expire", caseNodeExpiry},
	{"Nodes/Leave", caseLeave},
	{"Requests/EnqueueQueuedOrder", caseEnqueue},
	{"TakeRequest/TriggerRemovedWithLock", caseTakeTrigger},
	{"TakeRequest/Race32", caseTakeRace},
	{"TakeRequest/RaceTwoQueued", caseTakeRaceTwo},
	{"TakeRequest/RaceDrainEachOnce", caseTakeDrain},
	{"TakeRequest/HeldLockContended", caseTakeContended},
	{"TakeRequest/EmptyQueueTakesNoLock", caseTakeEmpty},
	{"TakeRequest/HandleIsALock", caseTakeHandle},
	{"TakeRequest/MarkUntouched", caseTakeMark},
	{"TakeRequest/ResentSameTake", caseTakeResent},
	{"TakeRequest/ResentAfterLockEnded", caseTakeResentAfterLockEnded},
	{"TakeRequest/ResentWhileAnotherHolds", caseTakeResentWhileAnotherHolds},
	{"TakeRequest/ResentBackfill", caseTakeResentBackfill},
	{"TakeRequest/UnheardTriggerRequeued", caseTakeUnheardRequeued},
	{"TakeRequest/HeardTriggerNotRequeued", caseTakeHeardNotRequeued},
	{"TakeRequest/LateCopyAfterHeard", caseTakeLateCopyAfterHeard},
	{"TakeRequest/ReusedTokenThenGiveBack", caseTakeReusedTokenThenGiveBack},
	{"GiveBack/AfterConfirmingRenewal", caseGiveBackAfterRenew},
	{"GiveBack/AfterRelease", caseGiveBackAfterRelease},
	{"GiveBack/AfterRequeuedNotTwice", caseGiveBackAfterRequeued},
	{"GiveBack/Backfill", caseGiveBackBackfill},
	{"Backfill/ResumableUntilDone", caseBackfill},
	{"Backfill/DoneNotAtTheHead", caseBackfillDoneNotAtHead},
	{"Backfill/SecondIsBusy", caseBackfillBusy},
	{"Backfill/RaceOneTaker", caseBackfillRace},
	{"Actions/NewestFirstKept", caseActions},
	{"Stops/ListedActedResent", caseStops},
	{"Stops/Expire", caseStopExpiry},
	{"CancelQueue", caseCancelQueue},
	{"Accepted", caseAccepted},
	{"Held", caseHeld},
	{"Namespaces/Isolate", caseNamespaces},
	{"BadInput", caseBadInput},
	{"Context/Cancelled", caseCancelled},
}

// Times the cases use. Stored times have microsecond precision on every
// backend, so inputs are whole microseconds, in UTC.
var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	longTTL = time.Minute
	// nodeTTL is the announcement lease of the expiry case on real time:
	// long enough that a loaded machine still sees the node before it
	// lapses, short enough to wait for.
	nodeTTL   = 2 * time.Second
	realSlack = 500 * time.Millisecond
)

// suite is one case's view of the backend.
type suite struct {
	t   *testing.T
	b   Backend
	ctx context.Context
}

// store returns a new Store of this case's cluster (a new node).
func (s *suite) store() cluster.Store {
	s.t.Helper()
	st := s.b.New(s.t)
	if st == nil {
		s.t.Fatal("Backend.New returned a nil Store")
	}
	s.closeAtEnd(st)
	return st
}

// other returns a Store of another cluster on the same server.
func (s *suite) other() cluster.Store {
	s.t.Helper()
	st := s.b.NewOtherCluster(s.t)
	if st == nil {
		s.t.Fatal("Backend.NewOtherCluster returned a nil Store")
	}
	s.closeAtEnd(st)
	return st
}

type closer interface {
	Close(ctx context.Context) error
}

func (s *suite) closeAtEnd(st cluster.Store) {
	c, ok := st.(closer)
	if !ok {
		return
	}
	s.t.Cleanup(func() {
		ctx, cancel := contextWithTimeout()
		defer cancel()
		if err := c.Close(ctx); err != nil {
			s.t.Errorf("closing a store at the end of the case: %v", err)
		}
	})
}

// contextWithTimeout is the context of a cleanup: a fresh one, since the
// test's own is cancelled by the time cleanup runs.
func contextWithTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// locker returns the Locker sharing st's lock table; it must be a
// TickLocker too.
func (s *suite) locker(st cluster.Store) locking.Locker {
	s.t.Helper()
	var l locking.Locker
	if s.b.Locker != nil {
		l = s.b.Locker(s.t, st)
	} else {
		var ok bool
		if l, ok = st.(locking.Locker); !ok {
			s.t.Fatalf("Backend.Locker is nil and the store %T is not a locking.Locker", st)
		}
	}
	if l == nil {
		s.t.Fatal("Backend.Locker returned nil")
	}
	if _, ok := l.(locking.TickLocker); !ok {
		s.t.Fatalf("the Locker %T of the store is not a locking.TickLocker", l)
	}
	return l
}

// now reads the store's clock.
func (s *suite) now() time.Time {
	if s.b.Now != nil {
		return s.b.Now()
	}
	return time.Now()
}

// passTime moves the store's clock by d, or waits d for real.
func (s *suite) passTime(d time.Duration) {
	if s.b.Advance != nil {
		s.b.Advance(d)
		return
	}
	time.Sleep(d)
}

func (s *suite) check(err error, what string) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

func (s *suite) wantErrIs(err, target error, what string) {
	s.t.Helper()
	if err == nil {
		s.t.Fatalf("%s = nil, want an error wrapping %q", what, target)
	}
	if !errors.Is(err, target) {
		s.t.Fatalf("%s = %v, want an error wrapping %q", what, err, target)
	}
}

// noPanic runs f and turns a panic into a failure naming what.
func (s *suite) noPanic(what string, f func()) {
	s.t.Helper()
	defer func() {
		if r := recover(); r != nil {
			s.t.Fatalf("%s panicked: %v (bad input must be an error wrapping cluster.ErrInvalid)", what, r)
		}
	}()
	f()
}

// run builds a run of schedule started at base+sec seconds, with every
// field set (so a field a backend forgets shows up).
func run(schedule string, sec int, node string) cluster.Run {
	started := base.Add(time.Duration(sec) * time.Second)
	return cluster.Run{
		Schedule:   schedule,
		Tick:       started.Add(-1500 * time.Microsecond),
		Node:       node,
		Result:     "success",
		StartedAt:  started,
		Duration:   time.Duration(sec+1)*time.Second + 123456*time.Microsecond,
		Fence:      started.UnixMicro() + 7,
		Manual:     sec%2 == 1,
		Attempts:   1 + sec%3,
		Error:      fmt.Sprintf("exit status %d", sec),
		RunID:      fmt.Sprintf("run-%s-%d", schedule, sec),
		OutputTail: fmt.Sprintf("output of %d\nsecond line\n", sec),
		Anomaly:    []string{"", cluster.AnomalyOverrun, cluster.AnomalyTooFast}[sec%3],
		By:         []string{"", fmt.Sprintf("user-%d@host", sec)}[sec%2],
	}
}

// sameRun reports the first difference between two runs, "" if none.
func sameRun(got, want cluster.Run) string {
	switch {
	case got.Schedule != want.Schedule:
		return fmt.Sprintf("schedule %q, want %q", got.Schedule, want.Schedule)
	case !got.Tick.Equal(want.Tick):
		return fmt.Sprintf("tick %v, want %v", got.Tick, want.Tick)
	case got.Node != want.Node:
		return fmt.Sprintf("node %q, want %q", got.Node, want.Node)
	case got.Result != want.Result:
		return fmt.Sprintf("result %q, want %q", got.Result, want.Result)
	case !got.StartedAt.Equal(want.StartedAt):
		return fmt.Sprintf("started_at %v, want %v", got.StartedAt, want.StartedAt)
	case got.Duration != want.Duration:
		return fmt.Sprintf("duration %v, want %v", got.Duration, want.Duration)
	case got.Fence != want.Fence:
		return fmt.Sprintf("fence %d, want %d", got.Fence, want.Fence)
	case got.Manual != want.Manual:
		return fmt.Sprintf("manual %v, want %v", got.Manual, want.Manual)
	case got.Attempts != want.Attempts:
		return fmt.Sprintf("attempts %d, want %d", got.Attempts, want.Attempts)
	case got.Error != want.Error:
		return fmt.Sprintf("error %q, want %q", shorten(got.Error), shorten(want.Error))
	case got.RunID != want.RunID:
		return fmt.Sprintf("run_id %q, want %q", got.RunID, want.RunID)
	case got.OutputTail != want.OutputTail:
		return fmt.Sprintf("output_tail (%d bytes) %q, want (%d bytes) %q",
			len(got.OutputTail), shorten(got.OutputTail), len(want.OutputTail), shorten(want.OutputTail))
	case got.Anomaly != want.Anomaly:
		return fmt.Sprintf("anomaly %q, want %q", got.Anomaly, want.Anomaly)
	case got.By != want.By:
		return fmt.Sprintf("by %q, want %q", got.By, want.By)
	}
	return ""
}

// shorten keeps long texts readable in failure messages.
func shorten(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:40] + "…" + s[len(s)-40:]
}

// wantRuns fails unless got equals want, in order.
func (s *suite) wantRuns(got, want []cluster.Run, what string) {
	s.t.Helper()
	if len(got) != len(want) {
		s.t.Fatalf("%s: %d runs %v, want %d %v", what, len(got), runIDs(got), len(want), runIDs(want))
	}
	for i := range want {
		if d := sameRun(got[i], want[i]); d != "" {
			s.t.Fatalf("%s: run %d (%s): %s; got order %v, want %v", what, i, want[i].RunID, d, runIDs(got), runIDs(want))
		}
	}
}

func runIDs(rs []cluster.Run) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.RunID
	}
	return ids
}

// runs reads a schedule's history or fails.
func (s *suite) runs(st cluster.Store, schedule string, limit int) []cluster.Run {
	s.t.Helper()
	rs, err := st.Runs(s.ctx, schedule, limit)
	s.check(err, fmt.Sprintf("Runs(%q, %d)", schedule, limit))
	return rs
}

// request builds a request; backfill ticks are base+sec seconds.
func request(schedule, id string, sec int, backfill bool) cluster.Request {
	return cluster.Request{
		ID:       id,
		Schedule: schedule,
		Tick:     base.Add(time.Duration(sec) * time.Second),
		Backfill: backfill,
		By:       "ops@host",
		At:       base.Add(time.Hour + time.Duration(sec)*time.Microsecond),
	}
}

func sameRequest(got, want cluster.Request) string {
	switch {
	case got.ID != want.ID:
		return fmt.Sprintf("id %q, want %q", got.ID, want.ID)
	case got.Schedule != want.Schedule:
		return fmt.Sprintf("schedule %q, want %q", got.Schedule, want.Schedule)
	case !got.Tick.Equal(want.Tick):
		return fmt.Sprintf("tick %v, want %v", got.Tick, want.Tick)
	case got.Backfill != want.Backfill:
		return fmt.Sprintf("backfill %v, want %v", got.Backfill, want.Backfill)
	case got.By != want.By:
		return fmt.Sprintf("by %q, want %q", got.By, want.By)
	case !got.At.Equal(want.At):
		return fmt.Sprintf("at %v, want %v", got.At, want.At)
	}
	return ""
}

// wantQueue fails unless schedule's queue is want, oldest first.
func (s *suite) wantQueue(st cluster.Store, schedule string, want []cluster.Request, what string) {
	s.t.Helper()
	got, err := st.Requests(s.ctx, schedule)
	s.check(err, fmt.Sprintf("%s: Requests(%q)", what, schedule))
	if len(got) != len(want) {
		s.t.Fatalf("%s: queue of %q is %v, want %v", what, schedule, reqIDs(got), reqIDs(want))
	}
	for i := range want {
		if d := sameRequest(got[i], want[i]); d != "" {
			s.t.Fatalf("%s: queue of %q, request %d: %s (queue %v)", what, schedule, i, d, reqIDs(got))
		}
	}
}

func reqIDs(rs []cluster.Request) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids
}
