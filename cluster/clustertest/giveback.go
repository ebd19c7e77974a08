package clustertest

import (
	"fmt"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/locking"
)

// Given-back takes (cluster.Store.GiveBack): a taker that will not start a
// take's run puts its trigger back, once, whatever the backend heard of
// the take before, and never one the backend put back and another took.

// giveBack calls GiveBack or fails.
func (s *suite) giveBack(st cluster.Store, h *locking.Handle, what string) {
	s.t.Helper()
	s.check(st.GiveBack(s.ctx, h), fmt.Sprintf("%s: GiveBack(%v)", what, h))
}

// A take whose confirming renewal was applied (its reply lost: the taker
// does not start the run) is given back: its trigger is at the head of the
// queue again, once, however often the give-back is sent, and the lock is
// free; the next take runs it.
func caseGiveBackAfterRenew(s *suite) {
	a, b := s.store(), s.store()
	r1, r2 := request("job", "t1", 1, false), request("job", "t2", 2, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r1, r2}), "Enqueue")
	tk := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk, r1, "first TakeRequest")
	s.check(s.locker(a).Renew(s.ctx, tk.Handle), "Renew of the take's lock (its reply lost)")
	s.giveBack(a, tk.Handle, "after the confirming renewal")
	s.wantQueue(b, "job", []cluster.Request{r1, r2}, "after the give-back")
	s.wantHeld(b, "job", false, "after the give-back")
	s.wantQueued(b, []string{"job"}, "after the give-back")
	s.giveBack(a, tk.Handle, "the give-back resent")
	s.wantQueue(b, "job", []cluster.Request{r1, r2}, "after the give-back was resent")
	tk2 := s.takeTok(b, "job", "node-b", "tok-b")
	s.wantTaken(tk2, r1, "a take after the give-back")
	s.giveBack(a, tk.Handle, "the give-back resent once another took the trigger")
	s.wantQueue(b, "job", []cluster.Request{r2}, "after a late give-back")
	s.wantHeld(b, "job", true, "the other take's lock after a late give-back")
	s.release(b, tk2.Handle, "t1")
}

// A take released while live (the release after a confirmation that was
// not answered: the backend counts it heard) and then given back: its
// trigger goes back once. One never heard of (no renewal, no release) is
// given back as well, its lock released.
func caseGiveBackAfterRelease(s *suite) {
	a, b := s.store(), s.store()
	r1, r2 := request("job", "t1", 1, false), request("job", "t2", 2, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r1, r2}), "Enqueue")
	tk := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk, r1, "first TakeRequest")
	s.release(a, tk.Handle, "t1")
	s.giveBack(a, tk.Handle, "after the release")
	s.giveBack(a, tk.Handle, "the give-back resent")
	s.wantQueue(b, "job", []cluster.Request{r1, r2}, "after the release and the give-back")
	tk2 := s.takeTok(b, "job", "node-b", "tok-b")
	s.wantTaken(tk2, r1, "a take after the give-back")
	s.giveBack(b, tk2.Handle, "a take never confirmed")
	s.wantHeld(a, "job", false, "after the unconfirmed take's give-back")
	s.wantQueue(a, "job", []cluster.Request{r1, r2}, "after the unconfirmed take's give-back")
	tk3 := s.takeTok(a, "job", "node-a", "tok-a2")
	s.wantTaken(tk3, r1, "a take after the second give-back")
	s.release(a, tk3.Handle, "t1")
	s.wantQueue(b, "job", []cluster.Request{r2}, "t1 taken and released")
}

// A trigger the backend put back itself (its take never heard back, its
// lock ended and another's taken) is not put back again by a late
// give-back of that take, neither while it waits at the head of its queue
// nor once another node took it.
func caseGiveBackAfterRequeued(s *suite) {
	a, b := s.store(), s.store()
	r1, r2 := request("job", "t1", 1, false), request("job", "t2", 2, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r1, r2}), "Enqueue")
	tk := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk, r1, "first TakeRequest")
	s.endLock(a, "job")
	lb := s.locker(b)
	h, err := lb.TryLock(s.ctx, "job", longTTL)
	if err != nil || h == nil {
		s.t.Fatalf("TryLock(job) by another = %v, %v, want a handle", h, err)
	}
	s.wantContendedOn(s.takeTok(a, "job", "node-a", "tok-a"), r1, "the take resent while another holds the lock")
	s.wantQueue(b, "job", []cluster.Request{r1, r2}, "after the resend put t1 back")
	s.giveBack(a, tk.Handle, "a give-back of the put-back take")
	s.wantQueue(b, "job", []cluster.Request{r1, r2}, "after a give-back of the put-back take")
	s.wantHeld(b, "job", true, "another's lock after the give-back")
	s.check(lb.Release(s.ctx, h), "Release of the other lock")
	tk2 := s.takeTok(b, "job", "node-b", "tok-b")
	s.wantTaken(tk2, r1, "another node's take of t1")
	s.giveBack(a, tk.Handle, "the give-back resent once another took t1")
	s.wantQueue(b, "job", []cluster.Request{r2}, "after a give-back of a trigger another took")
	s.release(b, tk2.Handle, "t1")
}

// A backfill tick stays queued until Done: its give-back releases the
// lock, and the tick is still queued once.
func caseGiveBackBackfill(s *suite) {
	a, b := s.store(), s.store()
	b1, b2 := request("job", "b1", 1, true), request("job", "b2", 2, true)
	s.check(a.Enqueue(s.ctx, []cluster.Request{b1, b2}), "Enqueue")
	tk := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk, b1, "first TakeRequest")
	s.check(s.locker(a).Renew(s.ctx, tk.Handle), "Renew of the take's lock")
	s.giveBack(a, tk.Handle, "the backfill's give-back")
	s.giveBack(a, tk.Handle, "the backfill's give-back resent")
	s.wantHeld(b, "job", false, "after the backfill's give-back")
	s.wantQueue(b, "job", []cluster.Request{b1, b2}, "after the backfill's give-back")
	tk2 := s.takeTok(b, "job", "node-b", "tok-b")
	s.wantTaken(tk2, b1, "a take after the backfill's give-back")
	s.release(b, tk2.Handle, "b1")
}
