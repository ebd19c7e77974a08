package memory

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/locking"
)

// The memory Locker is also the cluster state (cluster.Store) of the
// processes sharing its table: the nodes of a test, or the one node of a
// single-node deployment. Histories, queues and acceptances of a schedule
// live in the shard of the schedule's lock, under its mutex; live nodes in
// one small table-wide map. Everything is bounded: a history by 1.25×keep, a
// queue by what operators enqueue (backfills by the CLI's 1,000 ticks),
// acceptances by a day, nodes by their TTL.

var _ cluster.Store = (*Locker)(nil)

// acceptedFor is how long Accepted remembers who took a request.
const acceptedFor = 24 * time.Hour

// minAcceptedSweep is the size below which a shard's acceptances are not
// swept.
const minAcceptedSweep = 64

// clusterState is the cluster.Store part of a shard. Call its methods with
// the shard's mutex held.
type clusterState struct {
	// runs are histories, oldest first by StartedAt, at most 1.25×keep+1
	// long (see insertRun).
	runs map[string][]cluster.Run
	// unstarted counts the runs of a history recorded unstarted
	// (Attempts 0), which a real run of their id replaces (insertRun);
	// absent when none.
	unstarted map[string]int
	// skips are the ticks consumed without a run, oldest first by Tick,
	// one per tick, at most 1.25×keep+1 long (as runs).
	skips map[string][]cluster.Skip
	// queues are request queues, oldest first; empty ones are deleted.
	queues map[string][]cluster.Request
	// accepted maps a schedule's request id to who took it, and when.
	accepted        map[acceptKey]acceptance
	acceptedSweepAt int
	// taken keeps, under a schedule and a take's token, the request the
	// take answered with, for its resends (cluster.Store.TakeRequest) and
	// its give-back (GiveBack). A trigger's record not heard from is kept
	// until its lock lapses unheard (requeueLapsed); once its taker is
	// heard (a renewal or release of the take's lock: hearTake) it no
	// longer answers resends, and is kept until cluster.TakeKeep of its
	// TTL has passed, for a give-back; a backfill's record until then
	// too.
	taken        map[acceptKey]takeRecord
	takenSweepAt int
}

// takeRecord is what a take answered: its request, kept until until (a
// trigger's not heard, until requeueLapsed or GiveBack).
type takeRecord struct {
	req   cluster.Request
	until time.Duration // on the table's elapsed clock
	at    time.Duration // when the take was first applied: requeue order
	// heard: its taker renewed or released the take's lock (hearTake):
	// never requeued, and a trigger's no longer answering resends (a take
	// with its token takes nothing: resendTake); kept for GiveBack.
	heard bool
}

type acceptKey struct{ schedule, id string }

type acceptance struct {
	node string
	at   time.Duration // on the table's elapsed clock
}

func newClusterState() clusterState {
	return clusterState{
		runs:            make(map[string][]cluster.Run),
		unstarted:       make(map[string]int),
		skips:           make(map[string][]cluster.Skip),
		queues:          make(map[string][]cluster.Request),
		accepted:        make(map[acceptKey]acceptance),
		acceptedSweepAt: minAcceptedSweep,
		taken:           make(map[acceptKey]takeRecord),
		takenSweepAt:    minAcceptedSweep,
	}
}

// nodeTable holds the announcements.
type nodeTable struct {
	mu sync.Mutex
	m  map[string]liveNode
}

type liveNode struct {
	node    cluster.Node
	expires time.Duration // on the table's elapsed clock
}

// RecordRuns appends runs (cut by cluster.Bound) to their histories,
// trimming each to its newest keep (see insertRun). It checks every run
// before it stores any.
func (l *Locker) RecordRuns(ctx context.Context, runs []cluster.Run, keep int) error {
	if err := l.usable(ctx, "record runs"); err != nil {
		return err
	}
	if err := cluster.CheckKeep(keep); err != nil {
		return fmt.Errorf("locking/memory: record runs: %w", err)
	}
	for _, r := range runs {
		if err := cluster.CheckRun(r); err != nil {
			return fmt.Errorf("locking/memory: record runs: %w", err)
		}
	}
	for _, r := range runs {
		r = cluster.Bound(r)
		s := l.tab.shardFor(r.Schedule)
		s.mu.Lock()
		s.recordRun(r, keep)
		s.mu.Unlock()
	}
	return nil
}

// recordRun stores r in its schedule's history, one record per run id
// for a run recorded unstarted (Attempts 0: a manual run given back
// before it started, recorded lock_lost under its request's id): the real
// run of that id (Attempts > 0) replaces it, and an unstarted record of a
// run already recorded is not stored (cluster.Store's RecordRuns). Only
// then is the history searched: unstarted runs are rare. The shard's
// mutex is held.
func (s *clusterState) recordRun(r cluster.Run, keep int) {
	h := s.runs[r.Schedule]
	if r.Attempts == 0 || s.unstarted[r.Schedule] > 0 {
		for i := len(h) - 1; i >= 0; i-- {
			if h[i].RunID != r.RunID {
				continue
			}
			if r.Attempts == 0 || h[i].Attempts != 0 {
				return // recorded already, started or not
			}
			h = slices.Delete(h, i, i+1)
			s.unstarted[r.Schedule]--
			break
		}
	}
	h, gone := insertRun(h, r, keep)
	s.runs[r.Schedule] = h
	n := s.unstarted[r.Schedule] - gone
	if r.Attempts == 0 {
		n++
	}
	if n > 0 {
		s.unstarted[r.Schedule] = n
	} else {
		delete(s.unstarted, r.Schedule)
	}
}

// insertRun puts r into h (oldest first, so the usual newest run is an
// append) after every run that started at or before it, and trims h to its
// newest keep once it is a quarter over: trimming copies, so it is done
// once per keep/4 runs, not per run, and a history holds at most
// 1.25×keep+1 runs. It also returns how many unstarted runs (Attempts
// 0) it trimmed.
func insertRun(h []cluster.Run, r cluster.Run, keep int) (_ []cluster.Run, unstartedGone int) {
	i := len(h)
	for i > 0 && h[i-1].StartedAt.After(r.StartedAt) {
		i-- // runs arrive nearly in order: a short walk from the end
	}
	h = slices.Insert(h, i, r)
	if over := len(h) - keep; over > keep/4 {
		for _, t := range h[:over] {
			if t.Attempts == 0 {
				unstartedGone++
			}
		}
		n := copy(h, h[over:])
		clear(h[n:]) // the trimmed runs' output is garbage now
		return h[:n], unstartedGone
	}
	return h, 0
}

// RecordSkips stores skips (cut by cluster.BoundSkip), one per schedule
// and tick, the first kept, trimming each schedule's to its newest keep
// once it is a quarter over (as insertRun). It checks every skip before it
// stores any.
func (l *Locker) RecordSkips(ctx context.Context, skips []cluster.Skip, keep int) error {
	if err := l.usable(ctx, "record skips"); err != nil {
		return err
	}
	if err := cluster.CheckKeep(keep); err != nil {
		return fmt.Errorf("locking/memory: record skips: %w", err)
	}
	for _, k := range skips {
		if err := cluster.CheckSkip(k); err != nil {
			return fmt.Errorf("locking/memory: record skips: %w", err)
		}
	}
	for _, k := range skips {
		k = cluster.BoundSkip(k)
		s := l.tab.shardFor(k.Schedule)
		s.mu.Lock()
		s.skips[k.Schedule] = insertSkip(s.skips[k.Schedule], k, keep)
		s.mu.Unlock()
	}
	return nil
}

// insertSkip puts k into h (oldest tick first) unless h has its tick.
func insertSkip(h []cluster.Skip, k cluster.Skip, keep int) []cluster.Skip {
	i := len(h)
	for i > 0 && h[i-1].Tick.After(k.Tick) {
		i--
	}
	if i > 0 && h[i-1].Tick.Equal(k.Tick) {
		return h // the first record of a tick stays
	}
	h = slices.Insert(h, i, k)
	if over := len(h) - keep; over > keep/4 {
		n := copy(h, h[over:])
		clear(h[n:])
		return h[:n]
	}
	return h
}

// Skips returns up to limit skips of schedule, newest tick first.
func (l *Locker) Skips(ctx context.Context, schedule string, limit int) ([]cluster.Skip, error) {
	if err := l.checkSchedule(ctx, "skips", schedule); err != nil {
		return nil, err
	}
	if err := cluster.CheckLimit(limit); err != nil {
		return nil, fmt.Errorf("locking/memory: skips of %q: %w", schedule, err)
	}
	s := l.tab.shardFor(schedule)
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.skips[schedule]
	out := make([]cluster.Skip, min(limit, len(h)))
	for i := range out {
		out[i] = h[len(h)-1-i]
	}
	return out, nil
}

// Runs returns up to limit runs of schedule, newest first.
func (l *Locker) Runs(ctx context.Context, schedule string, limit int) ([]cluster.Run, error) {
	if err := l.checkSchedule(ctx, "runs", schedule); err != nil {
		return nil, err
	}
	if err := cluster.CheckLimit(limit); err != nil {
		return nil, fmt.Errorf("locking/memory: runs of %q: %w", schedule, err)
	}
	s := l.tab.shardFor(schedule)
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.runs[schedule]
	out := make([]cluster.Run, min(limit, len(h)))
	for i := range out {
		out[i] = h[len(h)-1-i]
	}
	return out, nil
}

// LastRuns returns the newest run of each schedule that has one.
func (l *Locker) LastRuns(ctx context.Context, schedules []string) (map[string]cluster.Run, error) {
	if err := l.usable(ctx, "last runs"); err != nil {
		return nil, err
	}
	for _, id := range schedules {
		if err := cluster.CheckSchedule(id); err != nil {
			return nil, fmt.Errorf("locking/memory: last runs: %w", err)
		}
	}
	out := make(map[string]cluster.Run)
	for _, id := range schedules {
		s := l.tab.shardFor(id)
		s.mu.Lock()
		if h := s.runs[id]; len(h) > 0 {
			out[id] = h[len(h)-1]
		}
		s.mu.Unlock()
	}
	return out, nil
}

// Announce records n as live for ttl on the table's clock. It keeps
// n.Schedules, not a copy (at 100,000 schedules a copy was 47 bytes a
// schedule more for the node, and as much again in garbage every
// announce): the caller must not change the map afterwards, as the agent
// never does (SetSchedules swaps in a new one).
func (l *Locker) Announce(ctx context.Context, n cluster.Node, ttl time.Duration) error {
	if err := l.usable(ctx, "announce"); err != nil {
		return err
	}
	if err := cluster.CheckNode(n, ttl); err != nil {
		return fmt.Errorf("locking/memory: announce: %w", err)
	}
	wall, now := l.tab.now()
	n.LastSeen = wall
	nt := &l.tab.nodes
	nt.mu.Lock()
	defer nt.mu.Unlock()
	nt.sweep(now)
	nt.m[n.NodeID] = liveNode{node: n, expires: expiry(now, ttl)}
	return nil
}

// Nodes returns the live nodes, sorted by id. Their Schedules maps are
// the announced ones, shared: read them, never change them.
func (l *Locker) Nodes(ctx context.Context) ([]cluster.Node, error) {
	if err := l.usable(ctx, "nodes"); err != nil {
		return nil, err
	}
	nt := &l.tab.nodes
	nt.mu.Lock()
	nt.sweep(l.tab.elapsed())
	out := make([]cluster.Node, 0, len(nt.m))
	for _, ln := range nt.m {
		out = append(out, ln.node)
	}
	nt.mu.Unlock()
	slices.SortFunc(out, func(a, b cluster.Node) int { return cmp.Compare(a.NodeID, b.NodeID) })
	return out, nil
}

// sweep drops the announcements that expired. Call with nt.mu held.
func (nt *nodeTable) sweep(now time.Duration) {
	for id, ln := range nt.m {
		if now >= ln.expires {
			delete(nt.m, id)
		}
	}
}

// Leave removes a node's announcement.
func (l *Locker) Leave(ctx context.Context, nodeID string) error {
	if err := l.usable(ctx, "leave"); err != nil {
		return err
	}
	if err := cluster.CheckNodeID(nodeID); err != nil {
		return fmt.Errorf("locking/memory: leave: %w", err)
	}
	nt := &l.tab.nodes
	nt.mu.Lock()
	defer nt.mu.Unlock()
	delete(nt.m, nodeID)
	return nil
}

// Enqueue appends reqs to their queues, all or none: a backfill of a
// schedule that has one queued refuses the whole call with ErrBusy.
func (l *Locker) Enqueue(ctx context.Context, reqs []cluster.Request) error {
	if err := l.usable(ctx, "enqueue"); err != nil {
		return err
	}
	keys := make([]string, 0, len(reqs))
	for _, r := range reqs {
		if err := cluster.CheckRequest(r); err != nil {
			return fmt.Errorf("locking/memory: enqueue: %w", err)
		}
		keys = append(keys, r.Schedule)
	}
	unlock := l.tab.lockAll(keys)
	defer unlock()
	for _, r := range reqs {
		if r.Backfill && slices.ContainsFunc(l.tab.shardFor(r.Schedule).queues[r.Schedule], isBackfill) {
			return fmt.Errorf("locking/memory: enqueue %q: %w", r.Schedule, cluster.ErrBusy)
		}
	}
	for _, r := range reqs {
		s := l.tab.shardFor(r.Schedule)
		s.queues[r.Schedule] = append(s.queues[r.Schedule], r)
	}
	return nil
}

func isBackfill(r cluster.Request) bool { return r.Backfill }

// lockAll locks the shards of keys, each once, in index order (so two
// callers cannot deadlock), and returns the unlock.
func (t *table) lockAll(keys []string) (unlock func()) {
	var idx []int
	for _, k := range keys {
		idx = append(idx, t.shardIndex(k))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		t.shards[i].mu.Lock()
	}
	return func() {
		for _, i := range idx {
			t.shards[i].mu.Unlock()
		}
	}
}

// Queued returns the schedules with requests queued, sorted.
func (l *Locker) Queued(ctx context.Context) ([]string, error) {
	if err := l.usable(ctx, "queued"); err != nil {
		return nil, err
	}
	var out []string
	for i := range l.tab.shards {
		s := &l.tab.shards[i]
		s.mu.Lock()
		s.requeueLapsed(l.tab.elapsed())
		for id := range s.queues {
			out = append(out, id)
		}
		s.mu.Unlock()
	}
	slices.Sort(out)
	return out, nil
}

// Requests returns schedule's queue, oldest first.
func (l *Locker) Requests(ctx context.Context, schedule string) ([]cluster.Request, error) {
	if err := l.checkSchedule(ctx, "requests", schedule); err != nil {
		return nil, err
	}
	s := l.tab.shardFor(schedule)
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.queues[schedule]), nil
}

// TakeRequest takes schedule's lock and the head of its queue under the
// shard mutex that guards both: the same step as TryLock's. A take with a
// token it has a record of is answered from that record (resendTake).
func (l *Locker) TakeRequest(ctx context.Context, r cluster.TakeReq) (cluster.Taken, error) {
	if err := l.usable(ctx, "take request"); err != nil {
		return cluster.Taken{}, err
	}
	if err := cluster.CheckTake(r); err != nil {
		return cluster.Taken{}, fmt.Errorf("locking/memory: take request: %w", err)
	}
	schedule := r.Schedule
	s := l.tab.shardFor(schedule)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Checked again under the shard lock, as in TryLock: Close cannot miss
	// a lock taken here.
	if l.closed.Load() {
		return cluster.Taken{}, fmt.Errorf("locking/memory: take request %q: %w", schedule, locking.ErrClosed)
	}
	wall, now := l.tab.now()
	if r.Token != "" {
		if tk, ok := l.resendTake(s, r, wall, now); ok {
			return tk, nil
		}
	}
	s.requeueLapsed(now)
	q := s.queues[schedule]
	if len(q) == 0 {
		return cluster.Taken{}, nil
	}
	head := q[0]
	if cur, ok := s.m[schedule]; ok && now < cur.expires {
		return cluster.Taken{Request: &head, Contended: true}, nil
	}
	token := r.Token
	if token == "" {
		tok, err := s.token()
		if err != nil {
			return cluster.Taken{}, fmt.Errorf("locking/memory: take request %q: %w", schedule, err)
		}
		token = hex.EncodeToString(tok[:])
	}
	if !head.Backfill {
		s.popHead(schedule)
	}
	return l.grantTake(s, r, token, head, wall, now), nil
}

// grantTake takes r's schedule lock under token for req, and records the
// take and its acceptance. Call with s.mu held.
func (l *Locker) grantTake(s *shard, r cluster.TakeReq, token string, req cluster.Request, wall time.Time, now time.Duration) cluster.Taken {
	fence := s.nextFence(wall)
	s.m[r.Schedule] = entry{owner: l, expires: expiry(now, r.TTL), fence: fence, token: token}
	s.acquired(r.Schedule, fence)
	s.sweepIfGrown(now)
	s.accept(acceptKey{r.Schedule, req.ID}, r.Node, now)
	if r.Token != "" {
		k := acceptKey{r.Schedule, r.Token}
		at := now
		if old, ok := s.taken[k]; ok {
			at = old.at
		}
		s.recordTake(k, takeRecord{req: req, until: expiry(now, cluster.TakeKeep(r.TTL)), at: at}, now)
	}
	return cluster.Taken{Request: &req, Handle: locking.NewHandle(l, r.Schedule, token, fence, r.TTL, nil)}
}

// resendTake answers r from the record of an earlier take with its token,
// if there is one (ok): see cluster.Store.TakeRequest. Call with s.mu
// held.
func (l *Locker) resendTake(s *shard, r cluster.TakeReq, wall time.Time, now time.Duration) (tk cluster.Taken, ok bool) {
	k := acceptKey{r.Schedule, r.Token}
	rec, found := s.taken[k]
	if !found || now >= rec.until {
		return cluster.Taken{}, false // none, or past its keep: a fresh take
	}
	if rec.heard && !rec.req.Backfill {
		// Its taker heard the take (a Token is resent only while its take
		// is undecided): a late copy, or the token reused. It takes
		// nothing, and leaves the record to the take's give-back: a
		// fresh take would replace it, and that give-back would then put
		// back another trigger and lose its own.
		return cluster.Taken{}, true
	}
	req := rec.req
	cur, held := s.m[r.Schedule]
	held = held && now < cur.expires
	switch {
	case held && cur.token == r.Token && cur.tick == 0:
		// The take's own lock: its answer was lost. Extended as a renewal
		// would, the caller counting its lease from this resend.
		cur.expires = expiry(now, r.TTL)
		s.m[r.Schedule] = cur
		rec.until = max(rec.until, expiry(now, cluster.TakeKeep(r.TTL)))
		s.taken[k] = rec
		return cluster.Taken{Request: &req, Handle: locking.NewHandle(l, r.Schedule, cur.token, cur.fence, r.TTL, nil)}, true
	case req.Backfill:
		// Its lock ended: the tick stayed queued (or ran, and Done took
		// it): a fresh take decides.
		delete(s.taken, k)
		return cluster.Taken{}, false
	case !held:
		// A trigger the take removed from the queue, whose lock ended
		// before its taker heard of it: only this record holds it.
		return l.grantTake(s, r, r.Token, req, wall, now), true
	default:
		// Another holds the lock: the trigger goes back to the head of the
		// queue for whoever takes it next, and this record no longer
		// answers for it.
		delete(s.taken, k)
		s.queues[r.Schedule] = append([]cluster.Request{req}, s.queues[r.Schedule]...)
		return cluster.Taken{Request: &req, Contended: true}, true
	}
}

// recordTake keeps a take's record, forgetting the backfills' and the
// heard triggers' past their keep whenever the map has doubled since it
// last did (a trigger's record not heard ends in requeueLapsed or
// GiveBack, never lost: see requeueLapsed). Call with s.mu held.
func (s *shard) recordTake(k acceptKey, rec takeRecord, now time.Duration) {
	s.taken[k] = rec
	if len(s.taken) < s.takenSweepAt {
		return
	}
	s.requeueLapsed(now)
	for k, r := range s.taken {
		if (r.req.Backfill || r.heard) && now >= r.until {
			delete(s.taken, k)
		}
	}
	s.takenSweepAt = max(2*len(s.taken), minAcceptedSweep)
}

// requeueLapsed puts back at the head of its queue every trigger whose
// take was never heard back: its record is still there and not heard (no
// renewal or release of the take's lock came from the taker: hearTake
// marks the record on either), and the schedule's lock is free (the take's lock
// ended: expired, or its session gone). The taker never started it: the scheduler
// renews a manual run's lock before it starts the run (scheduler's
// runManual), and runs it only once that renewal was answered, so a
// run that started has had its record heard. Without this, a trigger
// whose take's replies (and every resend's) were lost would live only in
// the record, and be run nowhere. Several lapsed triggers of a schedule
// go back in the order they were first taken. Call with s.mu held.
func (s *shard) requeueLapsed(now time.Duration) {
	var lapsed []acceptKey
	for k, r := range s.taken {
		if r.req.Backfill || r.heard {
			continue // it stayed queued until Done; or its taker heard it
		}
		if cur, ok := s.m[k.schedule]; ok && now < cur.expires {
			// Its lock is live (its taker may still hear of it), or another
			// holds the schedule's lock: nobody could run the trigger
			// before it is free anyway.
			continue
		}
		lapsed = append(lapsed, k)
	}
	if len(lapsed) == 0 {
		return
	}
	// Newest first, each put in front of the ones before: the oldest ends
	// up at the head.
	slices.SortFunc(lapsed, func(a, b acceptKey) int {
		return cmp.Or(cmp.Compare(s.taken[b].at, s.taken[a].at), cmp.Compare(b.id, a.id))
	})
	for _, k := range lapsed {
		req := s.taken[k].req
		delete(s.taken, k)
		s.queues[k.schedule] = append([]cluster.Request{req}, s.queues[k.schedule]...)
	}
}

// hearTake marks the record of the take whose lock key and token these
// are, if there is one, heard: its taker renewed or released the lock, so
// it heard the take's answer and will not resend it, and the trigger is
// its own (run, or given back: GiveBack), never to be requeued by the
// backend. The record stays until its keep, for a give-back. Call with
// s.mu held.
func (s *shard) hearTake(key, token string) {
	if len(s.taken) == 0 {
		return
	}
	k := acceptKey{key, token}
	if rec, ok := s.taken[k]; ok && !rec.heard {
		rec.heard = true
		s.taken[k] = rec
	}
}

// GiveBack ends the take of h (a TakeRequest's handle) whose run will not
// start: see cluster.Store.GiveBack.
func (l *Locker) GiveBack(ctx context.Context, h *locking.Handle) error {
	if err := l.check(ctx, "give back", h); err != nil {
		return err
	}
	s := l.tab.shardFor(h.Key())
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.closed.Load() {
		return fmt.Errorf("memory: give back %v: %w", h, locking.ErrClosed)
	}
	if _, err := s.own(h.Key(), h.Fence(), l.tab.elapsed()); err == nil {
		delete(s.m, h.Key())
	}
	k := acceptKey{h.Key(), h.Token()}
	rec, ok := s.taken[k]
	if !ok {
		return nil // given back already, requeued unheard, or past its keep
	}
	delete(s.taken, k)
	if !rec.req.Backfill {
		s.queues[k.schedule] = append([]cluster.Request{rec.req}, s.queues[k.schedule]...)
	}
	return nil
}

// popHead removes the head of a queue, deleting an emptied one. Call with
// s.mu held.
func (s *shard) popHead(schedule string) {
	q := s.queues[schedule]
	if len(q) <= 1 {
		delete(s.queues, schedule)
		return
	}
	q[0] = cluster.Request{}
	s.queues[schedule] = q[1:]
}

// accept records who took a request, forgetting those older than a day
// whenever the map has doubled since it last did. Call with s.mu held.
func (s *shard) accept(k acceptKey, node string, now time.Duration) {
	s.accepted[k] = acceptance{node: node, at: now}
	if len(s.accepted) < s.acceptedSweepAt {
		return
	}
	for k, a := range s.accepted {
		if now-a.at >= acceptedFor {
			delete(s.accepted, k)
		}
	}
	s.acceptedSweepAt = max(2*len(s.accepted), minAcceptedSweep)
}

// Done removes a backfill request from the head of its queue; anything
// else (a trigger, a request no longer at the head) is left alone.
func (l *Locker) Done(ctx context.Context, req cluster.Request) error {
	if err := l.usable(ctx, "done"); err != nil {
		return err
	}
	if err := cluster.CheckRequest(req); err != nil {
		return fmt.Errorf("locking/memory: done: %w", err)
	}
	s := l.tab.shardFor(req.Schedule)
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[req.Schedule]
	for i := range q {
		if q[i].Backfill && q[i].ID == req.ID {
			if i == 0 {
				s.popHead(req.Schedule)
			} else {
				s.queues[req.Schedule] = slices.Delete(q, i, i+1)
			}
			break
		}
	}
	return nil
}

// Accepted names the node that took request id of schedule, "" if none
// did within the last day.
func (l *Locker) Accepted(ctx context.Context, schedule, id string) (string, error) {
	if err := l.checkSchedule(ctx, "accepted", schedule); err != nil {
		return "", err
	}
	if id == "" {
		return "", fmt.Errorf("locking/memory: accepted: %w: empty request id for %q", cluster.ErrInvalid, schedule)
	}
	s := l.tab.shardFor(schedule)
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.accepted[acceptKey{schedule, id}]
	if !ok || l.tab.elapsed()-a.at >= acceptedFor {
		return "", nil
	}
	return a.node, nil
}

// Held reports whether schedule's own lock is held by anyone.
func (l *Locker) Held(ctx context.Context, schedule string) (bool, error) {
	if err := l.checkSchedule(ctx, "held", schedule); err != nil {
		return false, err
	}
	s := l.tab.shardFor(schedule)
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.m[schedule]
	return ok && l.tab.elapsed() < cur.expires, nil
}

// usable does what every Store method does first: context, closed Locker.
func (l *Locker) usable(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("locking/memory: %s: %w", op, err)
	}
	if l.closed.Load() {
		return fmt.Errorf("locking/memory: %s: %w", op, locking.ErrClosed)
	}
	return nil
}

// checkSchedule is usable plus a valid schedule id.
func (l *Locker) checkSchedule(ctx context.Context, op, schedule string) error {
	if err := l.usable(ctx, op); err != nil {
		return err
	}
	if err := cluster.CheckSchedule(schedule); err != nil {
		return fmt.Errorf("locking/memory: %s: %w", op, err)
	}
	return nil
}
