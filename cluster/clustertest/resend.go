package clustertest

import (
	"fmt"

	"github.com/bext-dev/bext-scheduler/cluster"
)

// Resent takes (cluster.Store.TakeRequest): a take whose reply was lost is
// sent again with its token, and is answered from what the first attempt
// took. The cases "lose" a reply by calling TakeRequest again with the
// same token.

// takeTok calls TakeRequest with a token or fails.
func (s *suite) takeTok(st cluster.Store, schedule, node, token string) cluster.Taken {
	s.t.Helper()
	tk, err := st.TakeRequest(s.ctx, cluster.TakeReq{Schedule: schedule, Node: node, TTL: longTTL, Token: token})
	s.check(err, fmt.Sprintf("TakeRequest(%q, token %q) by %s", schedule, token, node))
	return tk
}

// wantContendedOn fails unless tk is contended, showing request want.
func (s *suite) wantContendedOn(tk cluster.Taken, want cluster.Request, what string) {
	s.t.Helper()
	switch {
	case !tk.Contended || tk.Handle != nil:
		s.t.Fatalf("%s: handle %v, contended %v; want no handle, contended", what, tk.Handle, tk.Contended)
	case tk.Request == nil:
		s.t.Fatalf("%s: contended without a request, want %q", what, want.ID)
	}
	if d := sameRequest(*tk.Request, want); d != "" {
		s.t.Fatalf("%s: contended on %s", what, d)
	}
}

// endLock ends schedule's lock without a word from its holder
// (Backend.EndLock).
func (s *suite) endLock(st cluster.Store, schedule string) {
	s.t.Helper()
	if s.b.EndLock == nil {
		s.t.Fatal("Backend.EndLock is required: this case ends a take's lock that its taker never heard of")
	}
	s.b.EndLock(s.t, st, schedule)
}

// wantHeld fails unless Held answers want for schedule's lock.
func (s *suite) wantHeld(st cluster.Store, schedule string, want bool, what string) {
	s.t.Helper()
	held, err := st.Held(s.ctx, schedule)
	s.check(err, what+": Held")
	if held != want {
		s.t.Fatalf("%s: Held(%q) = %v, want %v", what, schedule, held, want)
	}
}

// A resent take whose lock is still held answers the same request and
// the same handle (token and fence), and takes nothing more: the next
// trigger stays queued. Another token is a fresh take: contended on the
// next head, and, once the lock is free, that head.
func caseTakeResent(s *suite) {
	a, b := s.store(), s.store()
	r1, r2 := request("job", "t1", 1, false), request("job", "t2", 2, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r1, r2}), "Enqueue")
	tk := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk, r1, "first TakeRequest")
	tk2 := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk2, r1, "the same take resent (its reply lost)")
	if tk2.Handle.Fence() != tk.Handle.Fence() || tk2.Handle.Token() != tk.Handle.Token() {
		s.t.Fatalf("the resent take's handle has fence %d, token %q; want the first's, %d, %q",
			tk2.Handle.Fence(), tk2.Handle.Token(), tk.Handle.Fence(), tk.Handle.Token())
	}
	s.wantQueue(b, "job", []cluster.Request{r2}, "after a take and its resend")
	node, err := b.Accepted(s.ctx, "job", "t1")
	s.check(err, "Accepted(t1)")
	if node != "node-a" {
		s.t.Fatalf("Accepted(t1) = %q after a take and its resend, want node-a", node)
	}
	s.wantContendedOn(s.takeTok(b, "job", "node-b", "tok-b"), r2, "another token's take while the lock is held")
	s.wantContendedOn(s.takeTok(a, "job", "node-a", "tok-a2"), r2, "this node's next take (a new token) while the lock is held")
	s.release(a, tk2.Handle, "t1")
	tk3 := s.takeTok(b, "job", "node-b", "tok-b")
	s.wantTaken(tk3, r2, "another token's take once the lock is free")
	s.release(b, tk3.Handle, "t2")
	if tk := s.takeTok(b, "job", "node-b", "tok-b2"); tk.Request != nil || tk.Handle != nil || tk.Contended {
		s.t.Fatalf("a fresh take on the emptied queue = %+v, want the zero Taken", tk)
	}
}

// A trigger's take whose lock ended (expired, its session gone) before its
// taker heard is taken again on a resend: the same request, the
// lock taken anew above the old fence; the queue is untouched.
func caseTakeResentAfterLockEnded(s *suite) {
	a, b := s.store(), s.store()
	r1, r2 := request("job", "t1", 1, false), request("job", "t2", 2, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r1, r2}), "Enqueue")
	tk := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk, r1, "first TakeRequest")
	s.endLock(a, "job")
	tk2 := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk2, r1, "the take resent after its lock ended")
	if tk2.Handle.Fence() <= tk.Handle.Fence() {
		s.t.Fatalf("the lock taken again has fence %d, want above the first's %d", tk2.Handle.Fence(), tk.Handle.Fence())
	}
	s.wantHeld(b, "job", true, "after the resend took the lock again")
	s.wantQueue(b, "job", []cluster.Request{r2}, "after the resend")
	if h, err := s.locker(b).TryLock(s.ctx, "job", longTTL); err != nil || h != nil {
		s.t.Fatalf("TryLock(job) while the resent take holds it = %v, %v; want (nil, nil)", h, err)
	}
	s.release(a, tk2.Handle, "the resent take's lock")
}

// A trigger's take whose lock ended and went to another holder before its
// taker heard: the resend answers contended and puts the trigger back at
// the head of the queue, so whoever takes it next runs it; the record is
// gone, so a further resend of the same take is a fresh one and never
// hands the trigger out twice.
func caseTakeResentWhileAnotherHolds(s *suite) {
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
	s.wantQueue(b, "job", []cluster.Request{r1, r2}, "after the resend gave t1 back")
	queued, err := b.Queued(s.ctx)
	s.check(err, "Queued")
	if len(queued) != 1 || queued[0] != "job" {
		s.t.Fatalf("Queued = %v after t1 went back to its queue, want [job]", queued)
	}
	s.check(lb.Release(s.ctx, h), "Release of the other's lock")
	tk2 := s.takeTok(b, "job", "node-b", "tok-b")
	s.wantTaken(tk2, r1, "a fresh take once the lock is free")
	// The first take resent once more: its record is gone; a fresh take,
	// contended on the next head, t1 not given back again.
	s.wantContendedOn(s.takeTok(a, "job", "node-a", "tok-a"), r2, "the first take resent again")
	s.wantQueue(b, "job", []cluster.Request{r2}, "after the first take was resent again")
	s.release(b, tk2.Handle, "t1")
}

// A backfill tick stays queued until Done: a resend of its take whose lock
// ended is a fresh take, so a tick that ran and was Done is not run again.
func caseTakeResentBackfill(s *suite) {
	a := s.store()
	b1, b2 := request("job", "b1", 1, true), request("job", "b2", 2, true)
	s.check(a.Enqueue(s.ctx, []cluster.Request{b1, b2}), "Enqueue")
	tk := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk, b1, "first TakeRequest")
	tk2 := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk2, b1, "the backfill's take resent while its lock is held")
	if tk2.Handle.Fence() != tk.Handle.Fence() {
		s.t.Fatalf("the resent take's fence %d, want the first's %d", tk2.Handle.Fence(), tk.Handle.Fence())
	}
	// Renewed before its run starts, as a trigger's take is (the renewal
	// that is its taker's word, which a backfill does not need: it stays
	// queued until Done).
	s.check(s.locker(a).Renew(s.ctx, tk2.Handle), "Renew of the backfill's take")
	s.check(a.Done(s.ctx, *tk2.Request), "Done(b1)")
	s.release(a, tk2.Handle, "b1")
	tk3 := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk3, b2, "the backfill's take resent after Done and release")
	s.release(a, tk3.Handle, "b2")
}

// A trigger whose take was never heard back (every reply lost, its taker
// gone or given up, and no resend answered) lives only in the take's
// record: once its lock ended without a renewal or release from its taker,
// it goes back to the head of its queue, ahead of later requests, and the
// next take of the free lock takes it. While another holds the lock it
// waits for it (the trigger could not run meanwhile either), its schedule
// still in Queued. The first take's token, resent after that, is a fresh
// take: the trigger is never handed out twice.
func caseTakeUnheardRequeued(s *suite) {
	a, b := s.store(), s.store()
	r1, r2 := request("job", "t1", 1, false), request("job", "t2", 2, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r1}), "Enqueue(t1)")
	s.wantTaken(s.takeTok(a, "job", "node-a", "tok-a"), r1, "the take whose replies are lost")
	s.check(a.Enqueue(s.ctx, []cluster.Request{r2}), "Enqueue(t2)")
	s.endLock(a, "job")
	lb := s.locker(b)
	h, err := lb.TryLock(s.ctx, "job", longTTL)
	if err != nil || h == nil {
		s.t.Fatalf("TryLock(job) by another = %v, %v, want a handle", h, err)
	}
	if tk := s.takeTok(b, "job", "node-b", "tok-b"); !tk.Contended || tk.Handle != nil {
		s.t.Fatalf("a take while another holds the lock = %+v, want contended", tk)
	}
	s.check(lb.Release(s.ctx, h), "Release of the other's lock")
	s.wantQueued(b, []string{"job"}, "the lock free, t1's take never heard back")
	tk := s.takeTok(b, "job", "node-b", "tok-b2")
	s.wantTaken(tk, r1, "the next take once the lock is free")
	s.wantQueue(b, "job", []cluster.Request{r2}, "after t1 was taken again")
	node, err := b.Accepted(s.ctx, "job", "t1")
	s.check(err, "Accepted(t1)")
	if node != "node-b" {
		s.t.Fatalf("Accepted(t1) = %q after node-b took it again, want node-b", node)
	}
	s.wantContendedOn(s.takeTok(a, "job", "node-a", "tok-a"), r2, "the first take resent after its trigger went back")
	s.release(b, tk.Handle, "t1")
	s.wantTaken(s.takeTok(a, "job", "node-a", "tok-a3"), r2, "the take after t1 ran")
}

// A taker that renewed its take's lock, or released it, heard the take: it
// ran the trigger or gave it up, and the trigger never goes back to its
// queue, though the lock then ends without a word (its node crashed
// mid-run).
func caseTakeHeardNotRequeued(s *suite) {
	a, b := s.store(), s.store()
	r1, r2, r3 := request("job", "t1", 1, false), request("job", "t2", 2, false), request("job", "t3", 3, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r1, r2, r3}), "Enqueue")
	tk := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk, r1, "first TakeRequest")
	s.check(s.locker(a).Renew(s.ctx, tk.Handle), "Renew of the take's lock")
	s.endLock(a, "job")
	tk2 := s.takeTok(b, "job", "node-b", "tok-b")
	s.wantTaken(tk2, r2, "a take after the renewed take's lock ended")
	s.release(b, tk2.Handle, "t2")
	tk3 := s.takeTok(b, "job", "node-b", "tok-b2")
	s.wantTaken(tk3, r3, "a take after t2's was released")
	s.release(b, tk3.Handle, "t3")
	if tk := s.takeTok(a, "job", "node-a", "tok-a4"); tk.Request != nil || tk.Handle != nil || tk.Contended {
		s.t.Fatalf("a take once every trigger was heard = %+v, want the zero Taken", tk)
	}
	s.wantQueued(b, nil, "every trigger heard and ended")
}

// wantNothing fails unless tk is the zero Taken: nothing taken, no lock,
// not contended.
func (s *suite) wantNothing(tk cluster.Taken, what string) {
	s.t.Helper()
	if tk.Request != nil || tk.Handle != nil || tk.Contended {
		id := ""
		if tk.Request != nil {
			id = tk.Request.ID
		}
		s.t.Fatalf("%s: request %q, handle %v, contended %v; want the zero Taken", what, id, tk.Handle, tk.Contended)
	}
}

// A late copy of a take (its first attempt held up in the network, the
// taker resent it and was answered) arrives once its taker renewed the
// lock, ran the trigger and released: the take's token names a take whose
// taker was heard, so it takes nothing, whether the lock is still the
// taker's, free or another's: the trigger that ran is neither taken again
// nor put back.
func caseTakeLateCopyAfterHeard(s *suite) {
	a, b := s.store(), s.store()
	r1, r2 := request("job", "t1", 1, false), request("job", "t2", 2, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r1}), "Enqueue(t1)")
	tk := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk, r1, "the resend answered")
	s.check(s.locker(a).Renew(s.ctx, tk.Handle), "Renew of the take's lock")
	s.wantNothing(s.takeTok(a, "job", "node-a", "tok-a"), "a late copy while t1 runs")
	s.check(s.locker(a).Renew(s.ctx, tk.Handle), "Renew of the take's lock after the late copy")
	s.release(a, tk.Handle, "t1 ran")
	s.wantNothing(s.takeTok(a, "job", "node-a", "tok-a"), "the late copy, the lock free")
	s.wantHeld(b, "job", false, "after the late copy, the lock free")
	s.wantQueue(b, "job", nil, "after the late copy, the lock free")
	s.wantQueued(b, nil, "after the late copy, the lock free")
	s.check(a.Enqueue(s.ctx, []cluster.Request{r2}), "Enqueue(t2)")
	tk2 := s.takeTok(b, "job", "node-b", "tok-b")
	s.wantTaken(tk2, r2, "another's take")
	s.wantNothing(s.takeTok(a, "job", "node-a", "tok-a"), "the late copy, another holding the lock")
	s.wantQueue(b, "job", nil, "after the late copy, another holding the lock")
	s.release(b, tk2.Handle, "t2")
	s.wantNothing(s.takeTok(b, "job", "node-b", "tok-b2"), "a take once t1 and t2 ran")
	s.wantQueued(b, nil, "t1 and t2 ran")
}

// A take's token sent again once its taker was heard (a late copy, or a
// token reused) does not replace the take's record: the taker's give-back
// (its confirming renewal applied, its reply lost, and its lock since
// ended) still puts back its own trigger, and the next one is not lost.
func caseTakeReusedTokenThenGiveBack(s *suite) {
	a, b := s.store(), s.store()
	r1, r2 := request("job", "t1", 1, false), request("job", "t2", 2, false)
	s.check(a.Enqueue(s.ctx, []cluster.Request{r1, r2}), "Enqueue")
	tk := s.takeTok(a, "job", "node-a", "tok-a")
	s.wantTaken(tk, r1, "first TakeRequest")
	s.check(s.locker(a).Renew(s.ctx, tk.Handle), "Renew of the take's lock (its reply lost)")
	s.endLock(a, "job")
	s.wantNothing(s.takeTok(a, "job", "node-a", "tok-a"), "the take's token again, its taker heard")
	s.giveBack(a, tk.Handle, "after the token came again")
	s.wantQueue(b, "job", []cluster.Request{r1, r2}, "after the give-back")
	tk2 := s.takeTok(b, "job", "node-b", "tok-b")
	s.wantTaken(tk2, r1, "a take after the give-back")
	s.release(b, tk2.Handle, "t1")
	s.wantQueue(b, "job", []cluster.Request{r2}, "t1 ran")
}
