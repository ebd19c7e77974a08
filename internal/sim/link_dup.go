package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Duplicated calls (issue 26): in a node's dup windows, a call the backend
// applied is applied once more a little later, as a retransmitted request
// is (a proxy or a client library that resends on a timeout it saw, the
// first copy having got through): a try-lock-tick with the same request
// (token included), a renewal or a release of the same handle. The copy's
// answer goes nowhere. The windows are drawn from a stream of their own,
// and each call's chance is hashed from the seed and the call (not
// drawn in call order).

// A duplicated try-lock-tick whose original was answered otherwise
// (contended: a run of the schedule held the lock) and heard, is granted
// by its copy once the lock is free and the tick still undecided: the
// grant is the request's token's, and its node, told "contended", moved
// on. Nobody runs it; the tick is consumed (the mark moves to it: it had
// been contended on every node, so it would not have run anyway) and the
// lock is held for nothing for its TTL, which can cost the next tick of
// an overlap = "skip" schedule. No safety invariant breaks (seed 48 of
// the first run with dup windows: s1@+105s contended on every node, the
// copy of node-3's request granted 2s later). The fix: the backend keeps,
// beside the tick mark, the tokens it answered for the undecided tick (a
// few, cleared when the mark moves) and answers a copy of one as it
// answered the original; or a request carries its caller's deadline and
// the backend refuses one past it (which bounds, not removes, the hole).
const holeDupGrant = "a duplicated try-lock-tick's copy grants a tick its node was told was contended"

// The copy's grant came while its node waited on the lost reply of the
// original (answered contended, or not granted): the node's resend, with
// the same token, comes after the copy's lock expired and is answered
// done. The cause and the fix are holeNoResend's (check.go: a grant
// record that outlives the lock answers the resend from the grant); kept
// apart so that this one stays routed when that one is closed, and is
// deleted with it if the fix covers both.
const holeDupResend = "a duplicated try-lock-tick's copy grants while its node waits on the original's lost reply"

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
// second to four) when a dup window covers now and the call's draw says
// so. apply runs on a goroutine of its own, whatever became of the node:
// the copy is in the network already.
func (l *link) dupLater(id string, apply func(ctx context.Context) string) {
	now := l.c.clock.Now()
	in := false
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

// dupTick applies a try-lock-tick batch again; a grant it makes goes to
// the grant log, undelivered, marked dup. heard: the original's answer
// reached the node.
func (l *link) dupTick(reqs []locking.TickRequest, heard bool) func(ctx context.Context) string {
	reqs = append([]locking.TickRequest(nil), reqs...)
	return func(ctx context.Context) string {
		issued := l.c.seq.Add(1)
		got, errs := l.mem.TryLockTicks(ctx, reqs)
		var out string
		for i, r := range reqs {
			if i >= len(got) || i >= len(errs) {
				break
			}
			out += fmt.Sprintf("[%s@%s: %v %v]", r.Key, l.c.at(r.Tick), got[i].Verdict, errs[i])
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
	return func(ctx context.Context) string { return fmt.Sprint(l.mem.Renew(ctx, h)) }
}

// dupRelease applies a release (or a batch of them) again.
func (l *link) dupRelease(hs ...*locking.Handle) func(ctx context.Context) string {
	hs = append([]*locking.Handle(nil), hs...)
	return func(ctx context.Context) string { return fmt.Sprint(l.mem.ReleaseAll(ctx, hs)) }
}
