package sim

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	store "github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// on_node_loss = "rerun" in the simulation. The harness plays the agent's
// look for lost runs (internal/agent rerunLost) from its own view of
// history: every second, the newest run start of each rerun schedule
// whose life crashed, its end never recorded, its tick within its window
// (one period), a registry's expiry (rerunAfter) after the crash. Then it
// calls the agent's own agent.Rerun, which does the rest (the schedule's
// lock, the re-run marker, the record read again, RunManual), on two
// running lives at once when it can (the marker must keep it once),
// through their links, with their faults. Invariant 1r (check.go): a
// lost run is re-run at most once, only once its life crashed, and never
// on a grant of its own.

// rerunAfter stands for the registry's expiry: how long after a crash a
// node is missing from the registry (three announce periods in
// production; shorter here, so that re-runs fall within short periods).
const rerunAfter = 3 * time.Second

// drawReruns marks a third of the locked schedules with a schedule's
// lock (not overlap allow) on_node_loss = "rerun", from a stream of its
// own: the rest of a seed's plan stays what it was.
func (p *plan) drawReruns(r *rand.Rand) {
	for i := range p.scheds {
		sp := &p.scheds[i]
		if sp.Hint != hints.NodeLocal && sp.Overlap != scheduler.OverlapAllow && r.IntN(3) == 0 {
			sp.rerun = true
		}
	}
}

// rerunLost is the harness's look for lost runs, at now (each second).
func (c *cluster) rerunLost(now time.Time) {
	if now.Before(c.nextRerun) {
		return
	}
	c.nextRerun = now.Add(time.Second)
	var running []*lifeState
	for _, l := range c.lives {
		if !l.stopped {
			running = append(running, l)
		}
	}
	if len(running) == 0 {
		return
	}
	for i := range c.plan.scheds {
		sp := &c.plan.scheds[i]
		if !sp.rerun {
			continue
		}
		lost, ok := c.lostRun(sp, now)
		if !ok {
			continue
		}
		sc := agent.Schedule{ID: sp.ID, TTL: ttl(sp.Schedule), Rerun: true, RerunWindow: rerunWindow(sp)}
		// Two lives look at once when there are two: the marker keeps it once.
		for k := range min(2, len(running)) {
			l := running[(int(now.Unix())+k)%len(running)]
			c.polling.Add(1)
			go func() {
				defer c.polling.Add(-1)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				if agent.Rerun(ctx, c.rerunDeps(l), sc, lost) {
					c.opsMu.Lock()
					c.opStats.reruns++
					c.opsMu.Unlock()
					c.event(c.clock.Now(), "%s/%d re-runs %s's lost run %.8s of %s", l.node, l.life, sp.ID, lost.RunID, c.at(lost.Tick))
				}
			}()
		}
	}
}

// lostRun is sp's newest run start, as history would show it, when it is
// lost: its life crashed rerunAfter ago or more, no end of it recorded,
// its tick within one period.
func (c *cluster) lostRun(sp *schedPlan, now time.Time) (store.Run, bool) {
	c.ledger.mu.Lock()
	defer c.ledger.mu.Unlock()
	newest, ok := c.newestStartLocked(sp.ID)
	if !ok || newest.Manual || now.Sub(newest.Tick) > rerunWindow(sp) {
		return store.Run{}, false
	}
	for _, l := range c.lives {
		if l.node == newest.Node && l.life == newest.life {
			if !l.crashed || now.Sub(l.diedAt) < rerunAfter {
				return store.Run{}, false
			}
		}
	}
	if c.endRecordedLocked(newest.RunID) {
		return store.Run{}, false
	}
	return store.Run{Schedule: sp.ID, Tick: newest.Tick, Node: newest.Node, Result: store.ResultRunning,
		StartedAt: newest.Start, RunID: newest.RunID, Fence: newest.Fence}, true
}

// newestStartLocked is schedule's newest run start (under ledger.mu).
func (c *cluster) newestStartLocked(schedule string) (startRec, bool) {
	var newest startRec
	found := false
	for _, s := range c.starts {
		if s.Schedule == schedule && (!found || !s.Start.Before(newest.Start)) {
			newest, found = s, true
		}
	}
	return newest, found
}

// endRecordedLocked reports whether a run record of runID is in history
// (under ledger.mu).
func (c *cluster) endRecordedLocked(runID string) bool {
	for _, h := range c.history {
		if h.RunID == runID {
			return true
		}
	}
	return false
}

// rerunDeps is agent.Rerun's view from life l: its link, history as the
// harness keeps it, its scheduler.
func (c *cluster) rerunDeps(l *lifeState) agent.RerunDeps {
	return agent.RerunDeps{
		Locker: l.link,
		LastRun: func(_ context.Context, schedule string) (store.Run, bool, error) {
			c.ledger.mu.Lock()
			defer c.ledger.mu.Unlock()
			s, ok := c.newestStartLocked(schedule)
			if !ok {
				return store.Run{}, false, nil
			}
			r := store.Run{Schedule: schedule, Tick: s.Tick, Node: s.Node, Result: store.ResultRunning, StartedAt: s.Start, RunID: s.RunID}
			if c.endRecordedLocked(s.RunID) {
				r.Result = string(scheduler.ResultSuccess) // ended: any final result
			}
			return r, true, nil
		},
		Runner: l.s,
		Now:    c.clock.Now,
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// rerunWindow is how late after its tick a lost run of sp is re-run: as
// if its catchup_window were a period and 20s, so that re-runs of short
// periods are drawn too (a default window of one period leaves a 5s
// schedule no time past rerunAfter and a lease).
func rerunWindow(sp *schedPlan) time.Duration { return sp.period + 20*time.Second }
