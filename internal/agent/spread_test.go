package agent_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/pg"
	"github.com/bext-dev/bext-scheduler/locking/redis"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// countingLocker counts one node's backend round trips on the tick path.
type countingLocker struct {
	scheduler.Locker
	tries, releases, renews atomic.Int64 // requests
	tryTrips, releaseTrips  atomic.Int64 // round trips: a batch is one
	releaseBatches          atomic.Int64 // ReleaseAll calls

	// perSession says ReleaseAll costs the backend a round trip per
	// session holding the handles' locks (Postgres: a lock is given back
	// on the session that took it), not one per batch. The wrapper cannot
	// see sessions; it counts one round trip per try-lock round trip that
	// granted the handles of a batch (origin), as each try-lock round trip
	// runs on one session: never fewer than the sessions (two grants of
	// one session may count twice).
	perSession bool
	origin     sync.Map // *locking.Handle → the tryTrips count of its grant
}

func (c *countingLocker) TryLockTick(ctx context.Context, r locking.TickRequest) (locking.TickAnswer, error) {
	c.tries.Add(1)
	trip := c.tryTrips.Add(1)
	ans, err := c.Locker.TryLockTick(ctx, r)
	if ans.Handle != nil {
		c.origin.Store(ans.Handle, trip)
	}
	return ans, err
}

// TryLockTicks and ReleaseAll pass the scheduler's batches on (Redis
// decides each in one script, Postgres in one transaction on one session):
// one round trip for all their requests.
func (c *countingLocker) TryLockTicks(ctx context.Context, reqs []locking.TickRequest) ([]locking.TickAnswer, []error) {
	c.tries.Add(int64(len(reqs)))
	trip := c.tryTrips.Add(1)
	if b, ok := c.Locker.(locking.TickBatcher); ok {
		answers, errs := b.TryLockTicks(ctx, reqs)
		for _, a := range answers {
			if a.Handle != nil {
				c.origin.Store(a.Handle, trip)
			}
		}
		return answers, errs
	}
	answers, errs := make([]locking.TickAnswer, len(reqs)), make([]error, len(reqs))
	for i, r := range reqs {
		answers[i], errs[i] = c.Locker.TryLockTick(ctx, r)
	}
	return answers, errs
}

func (c *countingLocker) Release(ctx context.Context, h *locking.Handle) error {
	c.releases.Add(1)
	c.releaseTrips.Add(1)
	c.origin.Delete(h)
	return c.Locker.Release(ctx, h)
}

func (c *countingLocker) ReleaseAll(ctx context.Context, hs []*locking.Handle) []error {
	c.releases.Add(int64(len(hs)))
	c.releaseBatches.Add(1)
	trips := int64(1)
	if c.perSession {
		origins := map[any]struct{}{}
		for i, h := range hs {
			o, ok := c.origin.LoadAndDelete(h)
			if !ok {
				o = -i - 1 // not granted through this wrapper: a trip of its own
			}
			origins[o] = struct{}{}
		}
		trips = int64(len(origins))
	}
	c.releaseTrips.Add(trips)
	if b, ok := c.Locker.(locking.ReleaseBatcher); ok {
		return b.ReleaseAll(ctx, hs)
	}
	// A backend without batched releases: one round trip each.
	c.releaseTrips.Add(int64(len(hs)) - trips)
	errs := make([]error, len(hs))
	for i, h := range hs {
		errs[i] = c.Locker.Release(ctx, h)
	}
	return errs
}

func (c *countingLocker) Renew(ctx context.Context, h *locking.Handle) error {
	c.renews.Add(1)
	return c.Locker.Renew(ctx, h)
}

// readyWatcher passes a watch on and tells when it first listens.
type readyWatcher struct {
	locking.TickWatcher
	once  sync.Once
	ready chan struct{}
}

func (r *readyWatcher) WatchTicks(ctx context.Context, w locking.TickWatch) error {
	inner := w.Listening
	w.Listening = func() {
		if inner != nil {
			inner()
		}
		r.once.Do(func() { close(r.ready) })
	}
	return r.TickWatcher.WatchTicks(ctx, w)
}

// Five nodes in one process on one real Redis, each with its agent (the
// registry, announced and read every 100ms) and its scheduler with the
// handoff, run 50 every-second require_global schedules for 24 seconds:
// over 1,000 ticks. Every tick runs exactly once, no node runs more than
// 1.5/N of them, and the backend round trips on the tick path, counted by
// wrapping each node's Locker, stay near one try-lock-tick per tick plus
// the release after the run.
func TestSpreadFiveNodesOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 24s of real time")
	}
	url := testenv.RedisURL(t)
	prefix := "bext:test:" + testenv.UniqueName(t) + ":"
	spreadFiveNodes(t, spreadMaxTries, spreadMaxTrips, func(id string) spreadLocker {
		lk, err := redis.Open(redis.Options{URL: url, KeyPrefix: prefix, Holder: id})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lk.Close(context.Background()) })
		return lk
	})
}

// The same on one real Postgres, one namespace: the handoff hears the
// marks the preferred node raised through LISTEN/NOTIFY (locking/pg).
// Without it every node asks for every tick (5 per tick); with it 1.11
// were measured: a mark is told only once its commit is flushed, and
// commits that notify are serialised by Postgres (one lock on the
// notification queue), so with 50 ticks due in the same second a few
// preferred nodes' marks arrive after the 100 ms handoff delay and a
// second node asks (and is answered done).
func TestSpreadFiveNodesOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 24s of real time")
	}
	url := testenv.PGURL(t)
	ns := testenv.UniqueName(t)
	admin, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, q := range []string{`DELETE FROM bext_lock_fences WHERE namespace = $1`, `DELETE FROM bext_nodes WHERE namespace = $1`, `DELETE FROM bext_runs WHERE namespace = $1`, `DELETE FROM bext_run_counts WHERE namespace = $1`} {
			if _, err := admin.Exec(ctx, q, ns); err != nil {
				t.Logf("cleaning: %v", err)
			}
		}
		_ = admin.Close(ctx)
	})
	spreadFiveNodes(t, spreadMaxTries, spreadMaxTrips, func(id string) spreadLocker {
		lk, err := pg.Open(context.Background(), pg.Options{URL: url, Namespace: ns, Holder: id})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lk.Close(context.Background()) })
		return lk
	})
}

// spreadLocker is what a node of spreadFiveNodes needs of its backend.
type spreadLocker interface {
	scheduler.Locker
	locking.TickWatcher
}

// The bounds sit between what the handoff achieves and what
// five nodes cost without it (5 try-lock-ticks and 6 round trips per
// tick): a handoff that stopped working fails them on any machine, and
// a loaded CI machine (marks delivered after a node's 100 ms turn:
// 1.59 try-lock-ticks per tick seen at load average 10, 1.02 on a quiet
// one) does not. The figures themselves are logged, for the note.
const (
	spreadMaxTries = 2.5
	spreadMaxTrips = 3.0
)

// spreadFiveNodes runs the test on the nodes open returns; maxTries bounds
// the try-lock-ticks per tick, maxTrips the round trips per tick.
func spreadFiveNodes(t *testing.T, maxTries, maxTrips float64, open func(id string) spreadLocker) {
	const (
		nodes     = 5
		schedules = 50
		seconds   = 24
		skew      = 500 * time.Millisecond
		delay     = 100 * time.Millisecond
	)
	var (
		mu   sync.Mutex
		runs = map[string]map[time.Time][]string{} // schedule → tick → nodes
	)
	var scheds []scheduler.Schedule
	for i := range schedules {
		id := fmt.Sprintf("spread-%02d", i)
		scheds = append(scheds, scheduler.Schedule{ID: id, CronExpr: "*/1 * * * * *", Hint: hints.RequireGlobal,
			ExpectedRuntime: time.Second,
			Job: scheduler.JobFunc(func(_ context.Context, tk scheduler.Tick) error {
				mu.Lock()
				if runs[id] == nil {
					runs[id] = map[time.Time][]string{}
				}
				runs[id][tk.Time] = append(runs[id][tk.Time], tk.NodeID)
				mu.Unlock()
				return nil
			})})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var counters []*countingLocker
	var agents []*agent.Agent
	var ids []string
	var scheds5 []*scheduler.Scheduler
	var watchers []*readyWatcher
	for i := range nodes {
		id := fmt.Sprintf("node-%d", i)
		ids = append(ids, id)
		lk := open(id)
		_, perSession := lk.(*pg.Locker)
		cl := &countingLocker{Locker: lk, perSession: perSession}
		counters = append(counters, cl)
		ab, err := agent.For(lk)
		if err != nil {
			t.Fatal(err)
		}
		var s *scheduler.Scheduler
		ag := agent.New(ab, noRunner{}, agent.Options{NodeID: id, AnnounceEvery: 100 * time.Millisecond})
		agents = append(agents, ag)
		rw := &readyWatcher{TickWatcher: lk, ready: make(chan struct{})}
		watchers = append(watchers, rw)
		s, err = scheduler.New(scheduler.Options{NodeID: id, Locker: cl, Backend: hints.Distributed,
			MaxClockSkew: skew, SafetyMargin: time.Second, Preferrer: ag.Preferrer(), HandoffDelay: delay,
			Watcher: rw}, scheds)
		if err != nil {
			t.Fatal(err)
		}
		scheds5 = append(scheds5, s)
		wg.Add(1)
		go func() { defer wg.Done(); ag.Run(ctx, nil) }()
	}
	// Every agent knows the five nodes before the schedulers start: a
	// state to poll, nothing tells it.
	deadline := time.Now().Add(10 * time.Second)
	for _, ag := range agents {
		for {
			if _, n := ag.Preferrer().Rank("x", time.Now()); n == nodes {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the agents never saw the five nodes")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	start := time.Now()
	for _, s := range scheds5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Run(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	for _, rw := range watchers {
		select {
		case <-rw.ready:
		case <-time.After(10 * time.Second):
			t.Fatal("a node never listened to raised marks")
		}
	}
	// Round trips are counted from the first tick every node fired for
	// sure (2s after the start): before it, each node's catch-up asks once
	// per schedule (DESIGN.md "Catch-up"), a start-up cost, not a tick's.
	first := start.Truncate(time.Second).Add(2 * time.Second)
	last := start.Add(seconds*time.Second - 2*time.Second)
	count := func() (tries, releases, renews int64) {
		for _, c := range counters {
			tries += c.tries.Load()
			releases += c.releases.Load()
			renews += c.renews.Load()
		}
		return
	}
	// trips sums the round trips of every node: all of them, those of
	// try-lock-ticks and of releases, and the ReleaseAll calls.
	type tally struct{ all, try, release, batches int64 }
	trips := func() (n tally) {
		for _, c := range counters {
			n.try += c.tryTrips.Load()
			n.release += c.releaseTrips.Load()
			n.batches += c.releaseBatches.Load()
			n.all += c.tryTrips.Load() + c.releaseTrips.Load() + c.renews.Load()
		}
		return n
	}
	time.Sleep(time.Until(first)) // the test is real time passing
	tries0, releases0, renews0 := count()
	trips0 := trips()
	time.Sleep(time.Until(last))
	trips1 := trips()
	time.Sleep(time.Until(start.Add(seconds * time.Second)))
	cancel()
	wg.Wait()
	triesAll, releasesAll, _ := count()

	perNode := map[string]int{}
	total, ran, runsAll := 0, 0, 0
	mu.Lock()
	for _, sc := range scheds {
		for tick := first; tick.Before(last); tick = tick.Add(time.Second) {
			total++
			got := runs[sc.ID][tick]
			if len(got) != 1 {
				t.Errorf("%s tick %v ran on %v, want exactly one node", sc.ID, tick.Format(time.RFC3339), got)
			}
		}
		for tick, byTick := range runs[sc.ID] {
			runsAll += len(byTick)
			if tick.Before(first) {
				continue
			}
			for _, n := range byTick {
				perNode[n]++
				ran++
			}
		}
	}
	mu.Unlock()
	if total < 1000 {
		t.Errorf("only %d ticks checked", total)
	}
	tries, releases, renews := count()
	tries, releases, renews = tries-tries0, releases-releases0, renews-renews0
	t.Logf("whole run, catch-up at start included: %d runs, %.3f try-lock-ticks + %.3f releases per run",
		runsAll, float64(triesAll)/float64(runsAll), float64(releasesAll)/float64(runsAll))
	limit := ran * 3 / (2 * nodes)
	for _, id := range ids {
		if perNode[id] > limit {
			t.Errorf("%s ran %d of %d ticks, over 1.5/N = %d", id, perNode[id], ran, limit)
		}
	}
	tpt, rpt := float64(tries)/float64(ran), float64(releases)/float64(ran)
	t.Logf("from the first tick on: %d nodes, %d runs (%d ticks checked exactly once): per node %v; per tick %.3f try-lock-ticks + %.3f releases + %.3f renewals = %.3f requests",
		nodes, ran, total, perNode, tpt, rpt, float64(renews)/float64(ran), tpt+rpt+float64(renews)/float64(ran))
	// Round trips: the scheduler sends the requests that wait together
	// (ticks due at the same instant on a node, releases of runs that end
	// together) in one batch, one round trip (a Postgres ReleaseAll: one
	// per session, counted by countingLocker.perSession).
	per := func(n int64) float64 { return float64(n) / float64(total) }
	rtt := per(trips1.all - trips0.all)
	t.Logf("round trips (batches counted once) from the first tick to the last checked: %.3f per tick (%.3f try-lock-tick, %.3f release in %.3f ReleaseAll calls)",
		rtt, per(trips1.try-trips0.try), per(trips1.release-trips0.release), per(trips1.batches-trips0.batches))
	// Redis: 1.42 measured on a quiet machine (the target: 1.5,
	// from 6); Postgres: 1.59-1.96 with batched releases on a loaded one
	// (load average 5-8; 1.97-2.09 before), where its marks arrive late
	// and more nodes ask. Bounded at maxTrips (2), as a loaded machine
	// delivers some marks late.
	if rtt > maxTrips {
		t.Errorf("%.3f backend round trips per tick at %d nodes, want at most %.2f (6 without handoff and batching)", rtt, nodes, maxTrips)
	}
	// Without the watch every node asks: 5 per tick; with it about 1
	// (1.02 measured on Redis on a quiet machine). On a loaded machine a
	// mark can reach a waiting node after its 100ms turn, which then asks
	// and is told done: hence maxTries.
	if tpt > maxTries {
		t.Errorf("%.3f try-lock-ticks per tick, want about 1 (at most %.2f)", tpt, maxTries)
	}
}
