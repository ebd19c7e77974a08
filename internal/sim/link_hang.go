package sim

import (
	"math/rand/v2"
	"time"
)

// Hung renewals: in a node's hang window a renewal does not return by its
// caller's deadline. It waits until the window ends, whatever the caller's
// context says, then goes to the backend, its answer coming late: a client
// stuck where it does not watch its context (a pool queue, a blocked write,
// a resolver), as the Postgres backend's renewals once were. The lease
// timer (scheduler/run.go) is what cancels a job whose renewal never
// returns; without it (the mutation NoLeaseTimer), the job runs on past its
// lease until the renewal comes back: invariant 5. Drawn from a stream of
// its own, so the rest of a seed's plan stays what it was.

// hang is a fault window in which renewals ignore their deadline.
const hang = dup + 1

// drawHangs gives a fifth of the nodes one hang window of 4-15s.
func (p *plan) drawHangs(r *rand.Rand) {
	for i := range p.nodes {
		if r.IntN(5) != 0 {
			continue
		}
		from := p.start.Add(time.Duration(r.Int64N(int64(p.span))))
		p.nodes[i].faults = append(p.nodes[i].faults, faultWindow{kind: hang, from: from,
			to: from.Add(time.Duration(4+r.IntN(12)) * time.Second)})
	}
}

// hung holds a renewal through a hang window covering now, ignoring the
// caller's deadline (not the node's crash: a dead process has no calls).
func (l *link) hung(id string) {
	now := l.c.clock.Now()
	for _, w := range l.faults {
		if w.kind != hang || !w.covers(now) {
			continue
		}
		l.c.event(now, "%s/%d %s hangs until %s, past its deadline", l.node, l.life, id, l.c.at(w.to))
		t := l.c.clock.NewTimer(w.to.Sub(now))
		select {
		case <-t.C():
		case <-l.dead:
			t.Stop()
		}
		return
	}
}
