package clustertest

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/locking"
)

// wantQueued fails unless the schedules with requests are want (any order).
func (s *suite) wantQueued(st cluster.Store, want []string, what string) {
	s.t.Helper()
	got, err := st.Queued(s.ctx)
	s.check(err, what+": Queued")
	got = slices.Clone(got)
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		s.t.Fatalf("%s: Queued = %v, want %v", what, got, want)
	}
}

// take calls TakeRequest or fails.
func (s *suite) take(st cluster.Store, schedule, node string) cluster.Taken {
	s.t.Helper()
	tk, err := st.TakeRequest(s.ctx, cluster.TakeReq{Schedule: schedule, Node: node, TTL: longTTL})
	s.check(err, fmt.Sprintf("TakeRequest(%q) by %s", schedule, node))
	return tk
}

// wantTaken fails unless tk took want with a lock on its schedule.
func (s *suite) wantTaken(tk cluster.Taken, want cluster.Request, what string) {
	s.t.Helper()
	switch {
	case tk.Request == nil:
		s.t.Fatalf("%s: TakeRequest took nothing (contended %v), want request %q", what, tk.Contended, want.ID)
	case tk.Handle == nil:
		s.t.Fatalf("%s: TakeRequest answered request %q without a lock handle (contended %v)", what, tk.Request.ID, tk.Contended)
	case tk.Contended:
		s.t.Fatalf("%s: TakeRequest answered a handle and Contended at once", what)
	case tk.Handle.Key() != want.Schedule:
		s.t.Fatalf("%s: the lock taken is on %q, want the schedule id %q", what, tk.Handle.Key(), want.Schedule)
	}
	if d := sameRequest(*tk.Request, want); d != "" {
		s.t.Fatalf("%s: took %s", what, d)
	}
}

// release gives back a taken lock through the store's Locker.
func (s *suite) release(st cluster.Store, h *locking.Handle, what string) {
	s.t.Helper()
	s.check(s.locker(st).Release(s.ctx, h), what+": Release of the taken lock")
}

// Requests queue per schedule in order, across Enqueue calls and nodes;
// Queued names the schedules that have some.
func caseEnqueue(s *suite) {
	a, b := s.store(), s.store()
	s.wantQueued(a, nil, "nothing enqueued")
	s.check(a.Enqueue(s.ctx, nil), "Enqueue of nothing")
	r1, r2, r3 := request("job", "t1", 1, false), request("job", "t2", 2, false), request("job", "t3", 0, false)
	o1 := request("other", "o1", 5, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r1, o1, r2}), "Enqueue(t1, o1, t2)")
	s.check(b.Enqueue(s.ctx, []cluster.Request{r3}), "Enqueue(t3) from another node")
	s.wantQueue(b, "job", []cluster.Request{r1, r2, r3}, "after two Enqueues")
	s.wantQueue(a, "other", []cluster.Request{o1}, "after two Enqueues")
	s.wantQueue(a, "empty", nil, "a schedule never asked for")
	s.wantQueued(b, []string{"job", "other"}, "two schedules with requests")

	tk := s.take(b, "other", "node-b")
	s.wantTaken(tk, o1, "TakeRequest(other)")
	s.release(b, tk.Handle, "other")
	s.wantQueued(a, []string{"job"}, "after other's only trigger was taken")
}

// A trigger leaves the queue in the step that takes the lock: the next
// one is the new head, and the lock is held until released.
func caseTakeTrigger(s *suite) {
	a, b := s.store(), s.store()
	r1, r2 := request("job", "t1", 1, false), request("job", "t2", 2, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r1, r2}), "Enqueue")
	tk := s.take(b, "job", "node-b")
	s.wantTaken(tk, r1, "first TakeRequest")
	s.wantQueue(a, "job", []cluster.Request{r2}, "after t1 was taken")
	held, err := a.Held(s.ctx, "job")
	s.check(err, "Held")
	if !held {
		s.t.Fatal("Held(job) = false while TakeRequest's lock is held")
	}
	// Done of a trigger is a no-op: t2 stays.
	s.check(b.Done(s.ctx, *tk.Request), "Done(t1)")
	s.wantQueue(a, "job", []cluster.Request{r2}, "after Done of a trigger")
	s.release(b, tk.Handle, "t1")

	tk = s.take(a, "job", "node-a")
	s.wantTaken(tk, r2, "second TakeRequest")
	s.wantQueue(b, "job", nil, "after both were taken")
	s.wantQueued(b, nil, "after both were taken")
	s.release(a, tk.Handle, "t2")
	if tk := s.take(a, "job", "node-a"); tk.Request != nil || tk.Handle != nil || tk.Contended {
		s.t.Fatalf("TakeRequest on the emptied queue = %+v, want the zero Taken", tk)
	}
}

// raceTake has n stores race TakeRequest on schedule at once and returns
// what each took.
func (s *suite) raceTake(n int, schedule string) ([]cluster.Store, []cluster.Taken) {
	s.t.Helper()
	stores := make([]cluster.Store, n)
	for i := range stores {
		stores[i] = s.store()
	}
	taken := make([]cluster.Taken, n)
	errs := make([]error, n)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			taken[i], errs[i] = stores[i].TakeRequest(s.ctx, cluster.TakeReq{Schedule: schedule, Node: fmt.Sprint("node-", i), TTL: longTTL})
		}()
	}
	start.Done()
	done.Wait()
	for i, err := range errs {
		s.check(err, fmt.Sprintf("racing TakeRequest by node-%d", i))
	}
	return stores, taken
}

// winners returns the indexes of the takes that got a handle.
func winners(taken []cluster.Taken) []int {
	var w []int
	for i, tk := range taken {
		if tk.Handle != nil {
			w = append(w, i)
		}
	}
	return w
}

// 32 nodes racing for one trigger: exactly one runs it.
func caseTakeRace(s *suite) {
	r := request("job", "t1", 1, false)
	s.check(s.store().Enqueue(s.ctx, []cluster.Request{r}), "Enqueue")
	stores, taken := s.raceTake(32, "job")
	w := winners(taken)
	if len(w) != 1 {
		s.t.Fatalf("%d of 32 racing nodes took the trigger (%v), want exactly 1", len(w), w)
	}
	s.wantTaken(taken[w[0]], r, "the winner")
	for i, tk := range taken {
		if i != w[0] && tk.Request != nil && !tk.Contended {
			s.t.Fatalf("node-%d got request %q without a lock and not contended", i, tk.Request.ID)
		}
	}
	s.wantQueue(stores[0], "job", nil, "after the race")
	node, err := stores[1].Accepted(s.ctx, "job", "t1")
	s.check(err, "Accepted")
	if want := fmt.Sprint("node-", w[0]); node != want {
		s.t.Fatalf("Accepted(t1) = %q, want the winner %q", node, want)
	}
	s.release(stores[w[0]], taken[w[0]].Handle, "the winner")
}

// Two queued triggers, 32 racers: the lock lets one run; the second
// trigger waits for the next turn.
func caseTakeRaceTwo(s *suite) {
	r1, r2 := request("job", "t1", 1, false), request("job", "t2", 2, false)
	s.check(s.store().Enqueue(s.ctx, []cluster.Request{r1, r2}), "Enqueue")
	stores, taken := s.raceTake(32, "job")
	w := winners(taken)
	if len(w) != 1 {
		s.t.Fatalf("%d of 32 racing nodes took a lock on job (%v), want exactly 1", len(w), w)
	}
	s.wantTaken(taken[w[0]], r1, "the winner")
	s.wantQueue(stores[0], "job", []cluster.Request{r2}, "after the race")
	s.release(stores[w[0]], taken[w[0]].Handle, "the winner")
}

// A lock held through the Locker (a scheduled run) makes TakeRequest
// contended: the request stays, nobody accepted it.
func caseTakeContended(s *suite) {
	a, b := s.store(), s.store()
	la := s.locker(a)
	h, err := la.TryLock(s.ctx, "job", longTTL)
	if err != nil || h == nil {
		s.t.Fatalf("TryLock(job) = %v, %v, want a handle", h, err)
	}
	r := request("job", "t1", 1, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r}), "Enqueue")
	tk := s.take(b, "job", "node-b")
	switch {
	case !tk.Contended || tk.Handle != nil:
		s.t.Fatalf("TakeRequest while the lock is held = handle %v, contended %v; want no handle, contended", tk.Handle, tk.Contended)
	case tk.Request == nil || tk.Request.ID != r.ID:
		s.t.Fatalf("TakeRequest while the lock is held: Request = %+v, want the queue's head %q", tk.Request, r.ID)
	}
	s.wantQueue(a, "job", []cluster.Request{r}, "after a contended TakeRequest")
	node, err := a.Accepted(s.ctx, "job", "t1")
	s.check(err, "Accepted")
	if node != "" {
		s.t.Fatalf("Accepted(t1) = %q after a contended TakeRequest, want empty", node)
	}
	s.check(la.Release(s.ctx, h), "Release of the Locker's lock")
	tk = s.take(b, "job", "node-b")
	s.wantTaken(tk, r, "TakeRequest once the lock is free")
	s.release(b, tk.Handle, "t1")
}

// An empty queue takes no lock: the key stays free for the Locker.
func caseTakeEmpty(s *suite) {
	a := s.store()
	s.check(a.Enqueue(s.ctx, []cluster.Request{request("other", "o1", 1, false)}), "Enqueue on another schedule")
	tk := s.take(a, "job", "node-a")
	if tk.Request != nil || tk.Handle != nil || tk.Contended {
		s.t.Fatalf("TakeRequest on an empty queue = %+v, want the zero Taken", tk)
	}
	held, err := a.Held(s.ctx, "job")
	s.check(err, "Held")
	if held {
		s.t.Fatal("Held(job) = true after TakeRequest on an empty queue, want false")
	}
	l := s.locker(s.store())
	h, err := l.TryLock(s.ctx, "job", longTTL)
	if err != nil || h == nil {
		s.t.Fatalf("TryLock(job) after TakeRequest on an empty queue = %v, %v, want a handle", h, err)
	}
	s.check(l.Release(s.ctx, h), "Release")
	s.wantQueue(a, "other", []cluster.Request{request("other", "o1", 1, false)}, "other schedule")
}

// The handle is an ordinary lock: it excludes TryLock, its fence is above
// the key's earlier fences, its TTL is the one asked, and the Locker
// renews and releases it.
func caseTakeHandle(s *suite) {
	a, b := s.store(), s.store()
	la, lb := s.locker(a), s.locker(b)
	h0, err := lb.TryLock(s.ctx, "job", longTTL)
	if err != nil || h0 == nil {
		s.t.Fatalf("TryLock(job) = %v, %v, want a handle", h0, err)
	}
	s.check(lb.Release(s.ctx, h0), "Release")
	s.check(a.Enqueue(s.ctx, []cluster.Request{request("job", "t1", 1, false)}), "Enqueue")
	tk := s.take(a, "job", "node-a")
	s.wantTaken(tk, request("job", "t1", 1, false), "TakeRequest")
	h := tk.Handle
	if h.Fence() <= h0.Fence() {
		s.t.Fatalf("fence of the taken lock %d, want above the key's earlier fence %d", h.Fence(), h0.Fence())
	}
	if h.TTL() != longTTL {
		s.t.Fatalf("TTL of the taken lock %v, want %v", h.TTL(), longTTL)
	}
	if h2, err := lb.TryLock(s.ctx, "job", longTTL); err != nil || h2 != nil {
		s.t.Fatalf("TryLock(job) while TakeRequest's lock is held = %v, %v, want (nil, nil)", h2, err)
	}
	s.check(la.Renew(s.ctx, h), "Renew of the taken lock through the Locker")
	s.check(la.Release(s.ctx, h), "Release of the taken lock through the Locker")
	h3, err := lb.TryLock(s.ctx, "job", longTTL)
	if err != nil || h3 == nil {
		s.t.Fatalf("TryLock(job) after the taken lock was released = %v, %v, want a handle", h3, err)
	}
	s.check(lb.Release(s.ctx, h3), "Release")
}

// TakeRequest does not move the tick mark: a tick right after a granted
// one is still granted after a trigger (asked later than both) ran.
func caseTakeMark(s *suite) {
	a := s.store()
	tl := s.locker(a).(locking.TickLocker)
	l := s.locker(a)
	now := s.now().Truncate(time.Second)
	req := func(t time.Time) locking.TickRequest {
		return locking.TickRequest{Key: "job", Tick: t, TTL: longTTL, MaxSkew: time.Minute, Window: time.Hour}
	}
	ans, err := tl.TryLockTick(s.ctx, req(now.Add(-30*time.Second)))
	s.check(err, "TryLockTick")
	if ans.Verdict != locking.TickGranted {
		s.t.Fatalf("TryLockTick(now-30s) = %v, want granted", ans.Verdict)
	}
	s.check(l.Release(s.ctx, ans.Handle), "Release of the tick's lock")
	tr := cluster.Request{ID: "t1", Schedule: "job", Tick: now, By: "ops", At: now}
	s.check(a.Enqueue(s.ctx, []cluster.Request{tr}), "Enqueue")
	tk := s.take(a, "job", "node-a")
	s.wantTaken(tk, tr, "TakeRequest")
	s.release(a, tk.Handle, "t1")
	ans, err = tl.TryLockTick(s.ctx, req(now.Add(-20*time.Second)))
	s.check(err, "TryLockTick after the trigger")
	if ans.Verdict != locking.TickGranted {
		s.t.Fatalf("TryLockTick(now-20s) after a trigger at now = %v, want granted: TakeRequest moved the mark", ans.Verdict)
	}
	s.check(l.Release(s.ctx, ans.Handle), "Release")
}

// 32 nodes drain a queue of 8 triggers, each releasing its lock as soon as
// it took one and trying again: every trigger runs exactly once. A store
// that takes the lock and the request in two steps runs some twice.
func caseTakeDrain(s *suite) {
	const n, triggers = 32, 8
	stores := make([]cluster.Store, n)
	for i := range stores {
		stores[i] = s.store()
	}
	var reqs []cluster.Request
	for i := range triggers {
		reqs = append(reqs, request("job", fmt.Sprint("t", i), i, false))
	}
	s.check(stores[0].Enqueue(s.ctx, reqs), "Enqueue")
	lockers := make([]locking.Locker, n)
	for i, st := range stores {
		lockers[i] = s.locker(st)
	}
	var mu sync.Mutex
	ran := map[string]int{}
	total := 0
	errs := make(chan error, n)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			for {
				tk, err := stores[i].TakeRequest(s.ctx, cluster.TakeReq{Schedule: "job", Node: fmt.Sprint("node-", i), TTL: longTTL})
				if err != nil {
					errs <- err
					return
				}
				if tk.Request == nil {
					return // drained
				}
				if tk.Handle == nil {
					continue // contended: someone runs a trigger now
				}
				mu.Lock()
				ran[tk.Request.ID]++
				total++
				over := total > triggers
				mu.Unlock()
				if err := lockers[i].Release(s.ctx, tk.Handle); err != nil {
					errs <- err
					return
				}
				if over {
					return // more runs than triggers: already wrong, stop
				}
			}
		}()
	}
	start.Done()
	done.Wait()
	close(errs)
	for err := range errs {
		s.t.Fatalf("draining: %v", err)
	}
	for _, r := range reqs {
		if ran[r.ID] != 1 {
			s.t.Fatalf("trigger %s ran %d times, want once (all: %v)", r.ID, ran[r.ID], ran)
		}
	}
	s.wantQueue(stores[0], "job", nil, "after the drain")
}
