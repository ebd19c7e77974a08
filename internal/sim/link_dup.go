package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Duplicated calls: in a node's dup windows, a call the backend
// applied is applied once more a little later: a renewal or a release of
// the same handle (a proxy that resends on a timeout it saw, the first copy
// having got through), and a resent try-lock-tick's earlier attempt, which
// the network delayed until after the resend was applied. A try-lock-tick
// goes out twice only when the scheduler resent it (same token and T): the
// Redis client does not retry by itself (locking/redis's url.go, no
// MaxRetries), Postgres's neither, and TCP does not duplicate. So only a
// request whose token the link sent before (resent) has a copy, and the
// copy is the first attempt (no Resend flag). An attempt the link lost
// before the backend saw it may have been delayed instead: a resend after
// one may have a copy outside dup windows too. The copy's answer goes
// nowhere. The windows are drawn from a stream of their own, and each
// call's chance is hashed from the seed and the call (not drawn in call
// order).
//
// Fixed: a late copy of an earlier attempt, once its resend was answered
// contended (heard, and its node moved on) or while its node waited on the
// resend's lost reply, was granted once the lock was free and the tick
// undecided: nobody ran it, the mark moved to T and the lock was held for
// nothing a TTL (seed 48 of the first run with dup windows; ~15 seeds in
// 300 when every try-lock-tick could be copied). Every backend now records
// a resend's verdict contended or done under its token and T
// (locking.TickRequest.Resend), and answers the copy the same. With copies
// of resends only, 300 seeds showed it in none even with the memory
// backend's record turned off: the regression test is lockertest's
// Tick/ResendContendedThenLateCopy and Tick/ResendDoneThenLateCopy.

// dup: a fault window in which applied calls may be applied again.
const dup = stall + 1

// dupChance is the chance that a call applied in a dup window is applied
// again.
const dupChance = 0.35

// drawDups gives a third of the nodes one or two dup windows.
func (p *plan) drawDups(r *rand.Rand) {
	for i := range p.nodes {
		if r.IntN(3) != 0 {
			continue
		}
		for range 1 + r.IntN(2) {
			from := p.start.Add(time.Duration(r.Int64N(int64(p.span))))
			p.nodes[i].faults = append(p.nodes[i].faults, faultWindow{kind: dup, from: from,
				to: from.Add(time.Duration(3+r.IntN(18)) * time.Second)})
		}
	}
}

// dupState counts the copies under way (the run has not ended before they
// landed) and those applied.
type dupState struct {
	dupsInFlight atomic.Int64
	dupsApplied  atomic.Int64
}

// dupLater applies the call named id again after a drawn delay (half a
// second to four) when a dup window covers now (or anyway) and the call's
// draw says so. apply runs on a goroutine of its own, whatever became of
// the node: the copy is in the network already.
func (l *link) dupLater(id string, anyway bool, apply func(ctx context.Context) string) {
	now := l.c.clock.Now()
	in := anyway
	for _, w := range l.faults {
		in = in || (w.kind == dup && w.covers(now))
	}
	if !in || !l.c.plan.chance(dupChance, "dup", l.node, l.life, id, now.UnixNano()) {
		return
	}
	delay := 500*time.Millisecond + time.Duration(l.c.plan.draw("dup delay", l.node, l.life, id, now.UnixNano())*float64(3500*time.Millisecond))
	l.c.event(now, "%s/%d %s: duplicated, the copy lands in %v", l.node, l.life, id, delay.Round(time.Millisecond))
	l.c.dupsInFlight.Add(1)
	t := l.c.clock.NewTimer(delay)
	go func() {
		defer l.c.dupsInFlight.Add(-1)
		<-t.C()
		what := apply(context.Background())
		l.c.dupsApplied.Add(1)
		l.c.event(l.c.clock.Now(), "%s/%d copy of %s applied: %s", l.node, l.life, id, what)
	}()
}

// resent returns the requests of reqs whose token this link sent before
// (resends), and records every token as sent; lost: whether an earlier
// attempt of any of them was lost before the backend saw it (lostFirst).
func (l *link) resent(reqs []locking.TickRequest) (out []locking.TickRequest, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range reqs {
		if r.Token == "" {
			continue
		}
		if was, ok := l.sent[r.Token]; ok {
			out = append(out, r)
			lost = lost || was
		} else {
			l.sent[r.Token] = false
		}
	}
	return out, lost
}

// lostFirst records that attempts of reqs were lost before the backend saw
// them: as far as their caller can tell, they may land later.
func (l *link) lostFirst(reqs []locking.TickRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range reqs {
		if r.Token != "" {
			l.sent[r.Token] = true
		}
	}
}

// dupTick applies again the first attempts of try-lock-ticks reqs, resends
// (resent), as if delayed on the network until after their resends; a
// grant it makes goes to the grant log, undelivered, marked dup. heard:
// the resend's answer reached the node.
func (l *link) dupTick(reqs []locking.TickRequest, heard bool) func(ctx context.Context) string {
	reqs = append([]locking.TickRequest(nil), reqs...)
	for i := range reqs {
		reqs[i].Resend = false
	}
	return func(ctx context.Context) string {
		issued := l.c.seq.Add(1)
		got, errs := l.mem.TryLockTicks(ctx, reqs)
		var out string
		for i, r := range reqs {
			if i >= len(got) || i >= len(errs) {
				break
			}
			out += fmt.Sprintf("[%s@%s: %v %v]", r.Key, l.c.at(r.Tick), got[i].Verdict, errs[i])
			l.logVerdict(r, got[i], errs[i], false, true)
			if errs[i] != nil || got[i].Verdict != locking.TickGranted || got[i].Handle == nil {
				continue
			}
			h := got[i].Handle
			l.c.grants.add(grant{node: l.node, life: l.life, key: r.Key, tick: r.Tick, perTick: r.PerTick,
				fence: h.Fence(), token: h.Token(), ttl: r.TTL, at: l.c.clock.Now(),
				issued: issued, returned: l.c.seq.Add(1), dup: true, origHeard: heard})
		}
		return out
	}
}

// dupRenew applies a renewal again.
func (l *link) dupRenew(h *locking.Handle) func(ctx context.Context) string {
	return func(ctx context.Context) string {
		err := l.mem.Renew(ctx, h)
		if err == nil {
			l.c.leases.applied(h.Token()) // the copy confirms a take as well
		}
		return fmt.Sprint(err)
	}
}

// dupRelease applies a release (or a batch of them) again.
func (l *link) dupRelease(hs ...*locking.Handle) func(ctx context.Context) string {
	hs = append([]*locking.Handle(nil), hs...)
	return func(ctx context.Context) string { return fmt.Sprint(l.mem.ReleaseAll(ctx, hs)) }
}
