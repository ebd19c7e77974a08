package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	store "github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/locking"
)

// The link's calls for manual runs: taking a request (the agent's poll,
// which the harness plays: cluster_ops.go) and reading a tick mark (the
// scheduler's check that a backfilled tick is decided). Both go through
// the fault windows like every other call.

var _ locking.MarkReader = (*link)(nil)

// TakeRequest takes the schedule's lock and its queue's head, under token
// (the poll resends a take whose answer was not definite with the same
// token, as the agent does: the backend answers it from its record of the
// take). A lost reply took them all the same. A lock it took goes to the
// grant log, marked manual, with the run's tick: tick (when the trigger
// was accepted) for a trigger, the backfilled tick for a backfill.
func (l *link) TakeRequest(ctx context.Context, schedule string, ttl time.Duration, tick time.Time, token string) (store.Taken, error) {
	defer l.hold()() // a frozen node's calls neither go out nor come back
	sent := l.c.clock.Now()
	tr, ok := l.mem.(requestTaker)
	if !ok {
		return store.Taken{}, fmt.Errorf("sim: the backend takes no requests: %w", errors.ErrUnsupported)
	}
	f, err := l.decide(ctx, "take-request "+schedule)
	if err != nil {
		return store.Taken{}, err
	}
	if f == loseFirst || f == failCall {
		return store.Taken{}, l.refusal(ctx, f)
	}
	issued := l.c.seq.Add(1)
	tk, err := tr.TakeRequest(ctx, store.TakeReq{Schedule: schedule, Node: l.node, TTL: ttl, Token: token})
	if l.cut.Load() {
		f = loseReply
	}
	if err == nil && tk.Handle != nil {
		h := tk.Handle
		if tk.Request.Backfill {
			tick = tk.Request.Tick
		}
		if f == pass {
			l.c.leases.heard(h.Token(), sent)
		}
		l.c.grants.add(grant{node: l.node, life: l.life, key: schedule, tick: tick, fence: h.Fence(), token: h.Token(),
			ttl: ttl, at: l.c.clock.Now(), issued: issued, returned: l.c.seq.Add(1), delivered: f == pass, manual: true, backfill: tk.Request.Backfill,
			runID: tk.Request.ID})
		if f != pass {
			l.c.opsMu.Lock()
			l.c.opStats.lostTakes++
			l.c.opsMu.Unlock()
		}
		l.c.event(l.c.clock.Now(), "%s/%d took request %s of %s, fence %d (delivered %v)", l.node, l.life,
			tk.Request.ID, schedule, h.Fence(), f == pass)
	}
	if f == loseReply {
		return store.Taken{}, l.refusal(ctx, f)
	}
	return tk, err
}

// GiveBack gives back a take whose run will not start
// (cluster.Store.GiveBack): through the fault windows, a lost reply
// applied all the same, and duplicated as a release is (a late copy finds
// nothing to give back).
func (l *link) GiveBack(ctx context.Context, h *locking.Handle) error {
	defer l.hold()() // a frozen node's calls neither go out nor come back
	gb, ok := l.mem.(requestGiver)
	if !ok {
		return fmt.Errorf("sim: the backend takes no requests: %w", errors.ErrUnsupported)
	}
	id := fmt.Sprintf("give-back %s fence %d", h.Key(), h.Fence())
	f, err := l.decide(ctx, id)
	if err != nil {
		return err
	}
	if f == loseFirst || f == failCall {
		return l.refusal(ctx, f)
	}
	err = gb.GiveBack(ctx, h)
	l.c.event(l.c.clock.Now(), "%s/%d gave back the take of %s, fence %d: %v (delivered %v)", l.node, l.life, h.Key(), h.Fence(), err, f == pass)
	l.dupLater(id, false, func(ctx context.Context) string { return fmt.Sprint(gb.GiveBack(ctx, h)) })
	if f == loseReply || l.cut.Load() {
		return l.refusal(ctx, loseReply)
	}
	return err
}

// Mark reads a key's tick mark. The harness keeps, per key, the sequence
// number after the last read returned (cluster.seq): a backfill accepted
// on that read must see no regular grant of its tick issued after it.
func (l *link) Mark(ctx context.Context, key string) (time.Time, bool, error) {
	defer l.hold()() // a frozen node's calls neither go out nor come back
	mr, ok := l.mem.(locking.MarkReader)
	if !ok {
		// The scheduler then refuses no backfill (manual.go).
		return time.Time{}, false, fmt.Errorf("sim: the backend reads no marks: %w", errors.ErrUnsupported)
	}
	f, err := l.decide(ctx, "mark "+key)
	if err != nil {
		return time.Time{}, false, err
	}
	if f != pass {
		return time.Time{}, false, l.refusal(ctx, f)
	}
	m, ok, err := mr.Mark(ctx, key)
	l.c.opsMu.Lock()
	if l.c.markRead == nil {
		l.c.markRead = map[string]markRead{}
	}
	l.c.markRead[l.node+"/"+key] = markRead{seq: l.c.seq.Add(1), at: l.c.clock.Now()}
	l.c.opsMu.Unlock()
	return m, ok, err
}
