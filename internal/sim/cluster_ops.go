package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	store "github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The harness's side of the operators' actions of plan_ops.go. A reload
// is carried out on every running node at once, as a config management
// tool pushing a new file and sending SIGHUP would. A trigger or backfill
// is queued in the cluster state (the CLI's Enqueue, without faults) and
// then taken by one node's poll, which the harness plays as the agent
// does (internal/agent's poll): TakeRequest through the node's link (so
// with its faults), then RunManual, releasing the lock when the scheduler
// refuses; a contended take is tried again a second later, as the next
// poll would.

// opsState is the cluster's record of the operators' actions.
type opsState struct {
	opsMu sync.Mutex
	// markRead is opsMu's: per node/key, the last mark read that
	// returned (link.Mark).
	markRead map[string]markRead
	// refused is opsMu's: the tokens of manual takes whose run the
	// scheduler refused (the lock was released, no run is owed).
	refused map[string]bool
	// refusedReq is opsMu's: the requests a take of which the scheduler
	// refused (the agent logs it and drops the request).
	refusedReq map[string]bool
	// backfills is opsMu's: the backfills the scheduler accepted.
	backfills []acceptedBackfill
	// polling counts the polls under way, and the reloads a frozen life
	// is yet to handle: the run has not ended before they have.
	polling atomic.Int64
	// opStats counts the actions carried out (opsMu's).
	opStats opStats
	// handovers is opsMu's: requests whose poll ended with its take never
	// heard back, for another running life's poll (handOver). Each counts
	// in polling until the harness's loop starts it, or drops it.
	handovers []handover
	// handedOver counts each request's hand-overs (handOver's: the
	// harness's loop only).
	handedOver map[string]int
	// doneSeq is opsMu's: per backfill request, cluster.seq after its
	// Done was applied (removed from its queue: no take gets it after).
	doneSeq map[string]uint64
}

// maxHandovers bounds the hand-overs of one request: a poll handed back
// to its only node would otherwise go on past the end of the run.
const maxHandovers = 4

// handover is a request a poll left unheard on life from.
type handover struct {
	op   opAction
	req  store.Request
	from *lifeState
}

// markRead is a mark read's return: cluster.seq after it, and the true
// time.
type markRead struct {
	seq uint64
	at  time.Time
}

// acceptedBackfill is a backfill RunManual accepted on a mark read (read):
// its tick was decided by then. fence is its take's.
type acceptedBackfill struct {
	node  string
	sched string
	tick  time.Time
	read  markRead
	fence int64
	at    time.Time
}

type opStats struct {
	reloads, triggers, backfills, refused, undecided, lostTakes int
	reruns                                                      int // lost runs re-run (rerun.go)
}

func (s *opStats) add(o opStats) {
	s.reloads += o.reloads
	s.triggers += o.triggers
	s.backfills += o.backfills
	s.refused += o.refused
	s.undecided += o.undecided
	s.lostTakes += o.lostTakes
	s.reruns += o.reruns
}

func (s opStats) String() string {
	return fmt.Sprintf("%d reloads, %d triggers and %d backfills accepted (%d refused, %d of them undecided backfills; %d takes lost); %d lost runs re-run",
		s.reloads, s.triggers, s.backfills, s.refused, s.undecided, s.lostTakes, s.reruns)
}

// untilNextOp shortens d so that the clock stops at the next action.
func (c *cluster) untilNextOp(now time.Time, d time.Duration) time.Duration {
	d = c.untilNextFreeze(now, d)
	for _, op := range c.plan.ops {
		if op.at.After(now) {
			d = min(d, op.at.Sub(now))
		}
	}
	return d
}

// operateOps carries out the actions due at now.
func (c *cluster) operateOps(now time.Time) {
	c.operateFreezes(now)
	c.handOver(now)
	c.rerunLost(now)
	for _, op := range c.plan.ops {
		if !op.at.Equal(now) {
			continue
		}
		switch op.kind {
		case opReload:
			c.reload(op, now)
		case opTrigger, opBackfill:
			c.enqueue(op, now)
		}
	}
}

// reload gives every running life its schedule set with op's timing.
func (c *cluster) reload(op opAction, now time.Time) {
	c.event(now, "operator reloads %s to %q on every running node", op.sched, op.cron)
	for _, l := range c.lives {
		if l.stopped {
			continue
		}
		set := make([]scheduler.Schedule, len(l.scheds))
		copy(set, l.scheds)
		for i := range set {
			if set[i].ID == op.sched {
				set[i].CronExpr = op.cron
			}
		}
		l.scheds = set
		if l.frz.frozen() {
			// A frozen process handles its SIGHUP on resume; and its
			// goroutines may hold what Reload waits for until then, which
			// the harness, waiting, would never bring.
			c.polling.Add(1)
			go func() {
				defer c.polling.Add(-1)
				l.frz.wait()
				c.mustReload(l, op, set)
			}()
			continue
		}
		c.mustReload(l, op, set)
	}
	c.opsMu.Lock()
	c.opStats.reloads++
	c.opsMu.Unlock()
}

func (c *cluster) mustReload(l *lifeState, op opAction, set []scheduler.Schedule) {
	if err := l.s.Reload(set); err != nil {
		panic(fmt.Sprintf("sim: reload of %s refused: %v", op.sched, err)) // a bug of plan_ops.go
	}
}

// enqueue queues op's request and starts the poll of the life op picks
// among those running.
func (c *cluster) enqueue(op opAction, now time.Time) {
	var running []*lifeState
	for _, l := range c.lives {
		if !l.stopped {
			running = append(running, l)
		}
	}
	if len(running) == 0 {
		c.event(now, "operator's %s of %s: no node running, not asked", op.kind, op.sched)
		return
	}
	req := store.Request{ID: op.id, Schedule: op.sched, Tick: now, Backfill: op.kind == opBackfill, By: "sim", At: now}
	if req.Backfill {
		// The drawn tick is of the spec without the schedule's spread,
		// drawn later (workload.go): the spread's tick at or after it.
		sp := c.sched(op.sched)
		cron, _ := c.plan.timing(op.sched, op.tick)
		req.Tick = sp.spec(cron).Next(op.tick.Add(-time.Nanosecond))
		op.tick = req.Tick
	}
	rs, ok := c.mem.(requestStore)
	if !ok {
		c.event(now, "operator's %s of %s: the backend keeps no requests, not asked", op.kind, op.sched)
		return
	}
	if err := rs.Enqueue(context.Background(), []store.Request{req}); err != nil {
		panic(fmt.Sprintf("sim: the memory backend refused a request: %v", err)) // no faults there
	}
	l := running[int(op.pick*float64(len(running)))]
	c.event(now, "operator asks %s of %s (request %s), %s/%d's poll takes it", op.kind, op.sched, op.id, l.node, l.life)
	c.polling.Add(1)
	go c.poll(l, op, req, 0)
}

// handOver starts, on another running life, the poll of each request
// whose poll ended with its take never heard back. In production every
// node's agent polls the queue (Queued lists a schedule whose trigger
// waits, unheard, to go back to its queue), so a node whose link stays
// broken, or that died, leaves the trigger to the others; here a request
// has one poll at a time (seed 203882: the poll's node stalled until it
// stopped, and no other node ever took the trigger).
func (c *cluster) handOver(now time.Time) {
	c.opsMu.Lock()
	hs := c.handovers
	c.handovers = nil
	c.opsMu.Unlock()
	for _, h := range hs {
		if !now.Before(c.plan.start.Add(c.plan.span)) || c.handedOver[h.op.id] >= maxHandovers {
			// The run is over (the request stays queued: check.go's
			// queuedAtEnd), or the request went round its nodes enough.
			c.event(now, "%s of %s not handed over again", h.op.id, h.op.sched)
			c.polling.Add(-1)
			continue
		}
		var to *lifeState
		for _, l := range c.lives {
			if !l.stopped && l != h.from {
				to = l
				break
			}
		}
		if to == nil && !h.from.stopped {
			to = h.from // the only node running: its agent polls on
		}
		if to == nil {
			c.event(now, "no other node running to poll %s of %s", h.op.id, h.op.sched)
			c.polling.Add(-1)
			continue
		}
		if c.handedOver == nil {
			c.handedOver = map[string]int{}
		}
		c.handedOver[h.op.id]++
		c.event(now, "%s/%d's poll takes over %s of %s, its take unheard on %s/%d", to.node, to.life, h.op.id, h.op.sched, h.from.node, h.from.life)
		go c.poll(to, h.op, h.req, c.handedOver[h.op.id]) // counted in polling since handed over
	}
}

// queued reports whether the backend's queue lists schedule id
// (cluster.Store.Queued, as the agent's poll reads it).
func (c *cluster) queued(id string) bool {
	q, ok := c.mem.(requestLister)
	if !ok {
		return false
	}
	ids, err := q.Queued(context.Background())
	return err == nil && slices.Contains(ids, id)
}

// requestLister is what the agents' polls and the checks read of the
// request queues: the memory backend's.
type requestLister interface {
	Queued(context.Context) ([]string, error)
	Requests(context.Context, string) ([]store.Request, error)
}

// started reports whether an attempt of run id started.
func (c *cluster) started(id string) bool {
	c.ledger.mu.Lock()
	defer c.ledger.mu.Unlock()
	return slices.ContainsFunc(c.ledger.atts, func(a *attempt) bool { return a.runID == id })
}

// handOff leaves req, whose take l's poll never heard back, to another
// life's poll (handOver).
func (c *cluster) handOff(l *lifeState, op opAction, req store.Request) {
	c.polling.Add(1)
	c.opsMu.Lock()
	c.handovers = append(c.handovers, handover{op: op, req: req, from: l})
	c.opsMu.Unlock()
}

// requestStore is the operator's side of manual run requests (the
// cluster state's queue), which the memory backend keeps.
type requestStore interface {
	Enqueue(ctx context.Context, reqs []store.Request) error
	Done(ctx context.Context, req store.Request) error
}

// requestTaker is a node's side of them (the agent's poll).
type requestTaker interface {
	TakeRequest(ctx context.Context, r store.TakeReq) (store.Taken, error)
}

// requestGiver gives back a take whose run will not start (the agent's
// giveBack).
type requestGiver interface {
	GiveBack(ctx context.Context, h *locking.Handle) error
}

// giveBack gives back l's take h of req, whose run will not start, as the
// agent's giveBack does: resent while its answer is not definite, within
// the take's record's keep (cluster.TakeKeep of its TTL from taken), and
// while l's node runs.
func (c *cluster) giveBack(l *lifeState, h *locking.Handle, req store.Request, taken time.Time) {
	until := taken.Add(store.TakeKeep(h.TTL()))
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := l.link.GiveBack(ctx, h)
		cancel()
		if err == nil || !(errors.Is(err, locking.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)) || errors.Is(err, errCut) {
			return
		}
		if !c.clock.Now().Add(step).Before(until) {
			c.event(c.clock.Now(), "%s/%d's give-back of %s undecided: given up", l.node, l.life, req.ID)
			return
		}
		t := c.clock.NewTimer(step)
		select {
		case <-t.C():
		case <-l.link.dead:
			t.Stop()
			return
		case <-l.done:
			t.Stop()
			return
		}
	}
}

// takeTokens returns the token drawer of a poll of request id on l, the
// poll started for it (handover 0) or its handover-th hand-over: each call
// draws the token of a new take, from the seed. The backend answers a take
// whose token it knows from its record of that take (the same lock and
// fence), so no two takes may share one, as no two of the agent's random
// tokens do; and one life can have several polls of a request at once
// (the one started for it goes on while a hand-over of it comes to the
// same life), each counting its draws from 0: the draws are told apart by
// the poll too.
func (c *cluster) takeTokens(l *lifeState, id string, handover int) func() string {
	draws := 0
	return func() string {
		token := fmt.Sprintf("%016x%016x", uint64(c.plan.draw("take token", l.node, l.life, id, handover, draws)*(1<<63)), c.plan.seed)
		draws++
		return token
	}
}

// pollTries bounds the polls of one request (one a second).
const pollTries = 20

// poll takes req with l's link and runs it on l's scheduler.
//
// handover: 0 for the poll started for req, k for its k-th hand-over.
// handed: the request was handed over (handOver), its trigger waiting,
// unheard, to go back to its queue: a queue found empty is polled again,
// for twice the TTL past the usual polls.
func (c *cluster) poll(l *lifeState, op opAction, req store.Request, handover int) {
	handed := handover > 0
	defer c.polling.Add(-1)
	sp := c.sched(op.sched)
	// A take's token: a take whose answer was not definite is resent with
	// it (internal/agent's poll does so too), and a new one is drawn after
	// a definite answer.
	token, newToken := "", c.takeTokens(l, op.id, handover)
	var tick time.Time
	// tries bounds the polls; unheard: the poll gave up while its take was
	// undecided (every reply lost): the agent's polls go on (each second,
	// listing Queued), and a trigger its take never heard back of goes
	// back to its queue once that take's lock is free (cluster.Store's
	// TakeRequest), within its TTL: the polls go on for twice that more,
	// and a queue found empty meanwhile is polled again.
	tries, unheard := pollTries, handed
	if handed {
		tries += int(2 * ttl(sp.Schedule) / step)
	}
	for try := 0; try < tries; try++ {
		if try == pollTries-1 && token != "" && !req.Backfill {
			unheard = true
			tries += int(2 * ttl(sp.Schedule) / step)
			c.event(c.clock.Now(), "%s/%d's take of %s undecided after %d polls: polling on", l.node, l.life, op.id, pollTries)
		}
		resending := token != ""
		if token == "" {
			token = newToken()
		}
		if try > 0 {
			t := c.clock.NewTimer(step)
			select {
			case <-t.C():
			case <-l.link.dead:
				t.Stop()
				if !req.Backfill && (token != "" || unheard) {
					c.handOff(l, op, req)
				}
				return
			case <-l.done:
				// The node stopped: its agent polls no more.
				t.Stop()
				if !req.Backfill && (token != "" || unheard) {
					c.handOff(l, op, req)
				}
				return
			}
		}
		trueSent := c.clock.Now()
		sent := trueSent.Add(l.plan.offset) // the node's clock
		if !resending {
			// A trigger's BEXT_TICK_TIME is when it was accepted: its
			// first take's send, kept by the take's resends. A backfill
			// runs its own tick (the link logs its grant with it). The
			// take may answer with either, whichever heads the queue.
			tick = sent.UTC().Truncate(time.Millisecond)
		}
		// The agent bounds a poll's calls by max(poll interval, 2s).
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		tk, err := l.link.TakeRequest(ctx, op.sched, ttl(sp.Schedule), tick, token)
		cancel()
		if err == nil || !(errors.Is(err, locking.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)) {
			// Decided (internal/agent's indefinite: no answer by the
			// deadline is not; seed 213644: a stalled take, counted
			// decided, was not resent, and a fresh take found nothing).
			token = "" // decided: the next take is a new one
		}
		switch {
		case errors.Is(err, errCut):
			if !req.Backfill && (token != "" || unheard) {
				c.handOff(l, op, req)
			}
			return
		case err != nil:
			c.event(c.clock.Now(), "%s/%d take-request %s failed: %v", l.node, l.life, op.id, err)
			continue
		case tk.Request == nil && unheard:
			continue // its trigger may go back to its queue yet
		case tk.Request == nil && !req.Backfill && c.queued(op.sched):
			// Nothing taken, and the queue still lists the schedule (a
			// trigger waiting, unheard, to go back to it): the agent's
			// next poll lists Queued and takes again; so does this one
			// (seed 213644: its fresh take came while the unheard take's
			// lock lived, and the poll stopped).
			continue
		case tk.Request == nil && resending && !req.Backfill:
			// A resend of a take never heard back, answered "nothing
			// queued": the take's lock is gone (expired, or the tick's
			// since), and its trigger waits, unheard, to go back to its
			// queue at the next take that finds the lock free. The
			// agent's polls go on listing Queued, which names it
			// meanwhile: so do these, for twice the TTL more (seed
			// 200059: the poll stopped here, and the trigger was never
			// run).
			unheard = true
			tries = try + 1 + int(2*ttl(sp.Schedule)/step)
			c.event(c.clock.Now(), "%s/%d's resent take of %s finds nothing queued: polling on", l.node, l.life, op.id)
			continue
		case tk.Request == nil:
			c.event(c.clock.Now(), "%s/%d finds no request of %s queued", l.node, l.life, op.sched)
			return
		case tk.Handle == nil:
			continue // contended: the next poll
		}
		if tk.Request.ID != req.ID {
			// The take answered with the head of the schedule's queue,
			// another request than the one this poll was started for (a
			// trigger put back at the head once its take's lock lapsed
			// unheard): the agent runs what it took, as that request
			// (seed 400975: a backfill's poll took a requeued trigger and
			// ran it as the backfill, which the scheduler refused as
			// undecided, and the release dropped the trigger as heard).
			// It polls on for its own request.
			got, gotOp, gotTick := *tk.Request, op, tick
			gotOp.id, gotOp.kind, gotOp.tick = got.ID, opTrigger, got.Tick
			if got.Backfill {
				gotOp.kind, gotTick = opBackfill, got.Tick
			}
			c.runTaken(l, gotOp, got, tk, gotTick, sent)
			continue
		}
		if req.Backfill {
			tick = req.Tick
		}
		c.runTaken(l, op, req, tk, tick, sent)
		return
	}
	c.event(c.clock.Now(), "%s/%d gave up taking %s after %d polls", l.node, l.life, op.id, tries)
	if !req.Backfill && (token != "" || unheard) {
		c.handOff(l, op, req)
	}
}

// runTaken runs req, taken by l's poll with tk, on l's scheduler, as the
// agent does: RunManual, and the lock released when it is refused.
func (c *cluster) runTaken(l *lifeState, op opAction, req store.Request, tk store.Taken, tick, sent time.Time) {
	done := func() {
		if req.Backfill {
			if err := c.mem.(requestStore).Done(context.Background(), req); err != nil {
				panic(fmt.Sprintf("sim: the memory backend refused Done: %v", err))
			}
			c.opsMu.Lock()
			if c.doneSeq == nil {
				c.doneSeq = map[string]uint64{}
			}
			if _, ok := c.doneSeq[req.ID]; !ok {
				c.doneSeq[req.ID] = c.seq.Add(1)
			}
			c.opsMu.Unlock()
		}
	}
	takenAt := c.clock.Now()
	m := scheduler.Manual{ID: op.sched, Tick: tick, RunID: req.ID, Handle: tk.Handle, Sent: sent, Backfill: req.Backfill,
		GiveBack: func() {
			// Its job never started (its take's confirming renewal
			// failed, or its lease ran out first): the node gives the
			// take back instead of Done and the release, and the
			// request goes back to its queue for the other nodes' polls
			// (a backfill never left it).
			c.event(c.clock.Now(), "%s/%d manual run %s of %s not started: giving it back", l.node, l.life, req.ID, op.sched)
			c.giveBack(l, tk.Handle, req, takenAt)
			if !req.Backfill && !c.started(req.ID) {
				c.handOff(l, op, req)
			}
		},
		Done: func(res scheduler.RunResult) {
			c.event(c.clock.Now(), "%s/%d manual run %s of %s ended: %s", l.node, l.life, req.ID, op.sched, res)
			if !l.link.cut.Load() {
				// A crashed node's agent tells the queue nothing: its
				// backfill stays queued for another poll (seed 381272:
				// crashed while its run's take was being confirmed,
				// the dead life's Done removed the backfill).
				done()
			}
			if res == scheduler.ResultLockLost && !req.Backfill && !c.started(req.ID) {
				// Its take's confirming renewal failed: the node gave
				// the trigger back (Manual.GiveBack; or, never heard
				// back, the backend puts it back once the lock is
				// free), for the other nodes' polls.
				c.handOff(l, op, req)
			}
		}}
	err := l.s.RunManual(m)
	c.opsMu.Lock()
	if err != nil {
		if c.refused == nil {
			c.refused = map[string]bool{}
		}
		c.refused[tk.Handle.Token()] = true
		if c.refusedReq == nil {
			c.refusedReq = map[string]bool{}
		}
		c.refusedReq[req.ID] = true
		c.opStats.refused++
		if errors.Is(err, scheduler.ErrTickUndecided) {
			c.opStats.undecided++
		}
	} else if req.Backfill {
		c.opStats.backfills++
		c.backfills = append(c.backfills, acceptedBackfill{node: l.node, sched: op.sched, tick: tick,
			read: c.markRead[l.node+"/"+op.sched], fence: tk.Handle.Fence(), at: c.clock.Now()})
	} else {
		c.opStats.triggers++
	}
	c.opsMu.Unlock()
	if err != nil {
		c.event(c.clock.Now(), "%s/%d refused manual run %s of %s: %v", l.node, l.life, req.ID, op.sched, err)
		c.giveBack(l, tk.Handle, req, takenAt) // as the agent does
		if errors.Is(err, scheduler.ErrTickUndecided) {
			done() // dropped: its regular tick runs it
		}
		return
	}
	c.event(c.clock.Now(), "%s/%d accepted manual run %s of %s, tick %s", l.node, l.life, req.ID, op.sched, c.at(tick))
}
