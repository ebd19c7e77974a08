package sim

import (
	"math/rand/v2"
	"time"
)

// Where the graceful stops landed (a stop at any point, in the
// jitter, in a run, in the grace): counted, so that a run of many seeds
// tells whether the plan's stop times reach every point. The plan draws
// them uniformly over a life; the runs are dense enough for that to hit
// each point (see the stats line of TestSim).

// stopStats counts the graceful stops (not the end of the run's) by what
// the stopped life was doing.
type stopStats struct {
	inJitter int // a tick granted and heard, its run not started yet
	inRun    int // a run going (it ends within the grace, or is cancelled)
	inRetry  int // between a failed attempt and its retry
}

func (s *stopStats) add(o stopStats) {
	s.inJitter += o.inJitter
	s.inRun += o.inRun
	s.inRetry += o.inRetry
}

// drawStopPoints moves half of the graceful stops (but a life's last,
// which the end of the run stops) to a moment just after a tick of a
// schedule with a jitter: the node that won the tick is then waiting out
// the jitter. Stops drawn uniformly land there rarely (5 in 300 seeds).
// The stop stays within its life, before the next one starts.
func (p *plan) drawStopPoints(r *rand.Rand) {
	var jittered []schedPlan
	for _, sp := range p.scheds {
		if sp.Jitter > 0 && locked(sp.Schedule) {
			jittered = append(jittered, sp)
		}
	}
	for i := range p.nodes {
		lives := p.nodes[i].lives
		for k := 0; k+1 < len(lives); k++ {
			if lives[k].crash || len(jittered) == 0 || r.IntN(2) != 0 {
				continue
			}
			sp := jittered[r.IntN(len(jittered))]
			cron, _ := p.timing(sp.ID, lives[k].to)
			tick := sp.spec(cron).Next(lives[k].to.Add(-5 * time.Second))
			to := tick.Add(100*time.Millisecond + time.Duration(r.Int64N(int64(sp.Jitter/2))))
			if to.After(lives[k].from.Add(5*time.Second)) && to.Before(lives[k+1].from.Add(-time.Second)) {
				lives[k].to = to
			}
		}
	}
}

// countStops fills c.stats.stopsAt.
func (c *cluster) countStops(all []run) {
	atts := c.ledger.all()
	gs := c.uniqueGrants()
	for _, l := range c.lives {
		if l.crashed || l.endedAt.IsZero() {
			continue
		}
		t := l.endedAt
		var running, retrying, waiting bool
		for _, r := range all {
			if r.node != l.node || r.life != l.life || r.start.After(t) {
				continue
			}
			for _, a := range atts {
				if a.runID == r.runID && a.node == r.node && a.life == r.life && !a.start.After(t) && (a.end.IsZero() || a.end.After(t)) {
					running = true
				}
			}
			sp := c.sched(r.sched)
			if !running && r.lastFailed && r.attempts <= sp.Retries && r.end.Before(t) &&
				r.end.Add(sp.RetryBackoff<<(r.attempts-1)).After(t) {
				retrying = true // its retry was due after the stop
			}
		}
		for _, g := range gs {
			if g.node != l.node || g.life != l.life || !g.delivered || g.at.After(t) {
				continue
			}
			started := false
			for _, r := range all {
				started = started || (r.node == g.node && r.life == g.life && r.sched == g.key && r.tick.Equal(g.tick) && !r.start.After(t))
			}
			if !started && g.at.Add(g.ttl).After(t) {
				waiting = true
			}
		}
		switch {
		case running:
			c.stats.stopsAt.inRun++
		case retrying:
			c.stats.stopsAt.inRetry++
		case waiting:
			c.stats.stopsAt.inJitter++
		}
	}
}
