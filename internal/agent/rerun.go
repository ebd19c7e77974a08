package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// on_node_loss = "rerun" (DESIGN.md "Re-running a lost run"). A run
// whose node died stays in history as its provisional record (result
// running, its node's id). Every RerunEvery, the live node first in a
// rerun schedule's rendezvous order looks at the schedule's newest
// record; when it is such a record of a node no longer in the registry,
// within the tick's re-run window, it re-runs it:
//
//  1. it takes the schedule's lock (a plain try-lock, the schedule's TTL):
//     held, the dead node's lease still lives (or a run of the schedule
//     goes on), and it tries again next time;
//  2. it takes the run's re-run marker, a lock of its own
//     (locking.RerunKey: schedule and tick) that lives past the tick's window
//     and is never released: the one taker of the marker re-runs, so a
//     lost run is re-run at most once, whoever looks, however often;
//  3. it reads the record again (the node may have been gone from the
//     registry only for a while, and recorded the run's end since);
//  4. it hands the run to the scheduler as a manual run carrying Rerun:
//     the same tick and run id, its attempts numbered on from the lost
//     one's, recorded as that run (its start), so that its final record
//     replaces the provisional one.

// rerunSchedules returns the node's schedules with on_node_loss = "rerun"
// that it runs (compact keeps them all in a.schedules).
func (a *Agent) rerunSchedules() []Schedule {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Schedule
	for _, sc := range a.schedules {
		if sc.Rerun && !sc.Elsewhere {
			out = append(out, sc)
		}
	}
	return out
}

// rerunLost looks for the lost runs of the rerun schedules this node
// watches, and re-runs each it may.
func (a *Agent) rerunLost(ctx context.Context) {
	live := a.live.Load()
	if live == nil {
		return // no registry read yet: every node would look dead
	}
	var mine []string
	byID := map[string]Schedule{}
	for _, sc := range a.rerunSchedules() {
		if rank, _ := live.peers.Rank(sc.ID, time.Time{}); rank == 0 {
			mine = append(mine, sc.ID)
			byID[sc.ID] = sc
		}
	}
	if len(mine) == 0 {
		return
	}
	last, err := a.b.LastRuns(ctx, mine)
	if err != nil {
		a.log.Debug("looking for lost runs failed", slog.Any("error", err))
		return
	}
	now := a.opts.Now()
	for id, r := range last {
		sc := byID[id]
		// A node missing from a registry read less than an announce
		// period after its run started may only not have announced yet
		// (both just started); one read later is gone. A node live again
		// under the same id (restarted by its supervisor: this one,
		// maybe) that started after the run began lost it all the same.
		if r.Result != cluster.ResultRunning || live.at.Before(r.StartedAt.Add(a.opts.AnnounceEvery)) ||
			now.Sub(r.Tick) > sc.RerunWindow || r.RunID == "" {
			continue
		}
		if started, ok := live.ids[r.Node]; ok && !started.After(r.StartedAt) {
			continue // its node lives, and ran it: not lost
		}
		if r.Node == a.opts.NodeID && !a.opts.StartedAt.After(r.StartedAt) {
			continue // this process's own run
		}
		a.rerun(ctx, sc, r)
	}
}

// rerun re-runs lost run r of sc (steps 1 to 4 above), if it may.
func (a *Agent) rerun(ctx context.Context, sc Schedule, r cluster.Run) {
	tl, ok := a.b.(locking.TryLocker)
	if !ok {
		return
	}
	Rerun(ctx, RerunDeps{
		Locker: struct {
			locking.TryLocker
			releaser
		}{tl, a.b},
		LastRun: func(ctx context.Context, id string) (cluster.Run, bool, error) {
			last, err := a.b.LastRuns(ctx, []string{id})
			r, ok := last[id]
			return r, ok, err
		},
		Runner: a.run, Now: a.opts.Now, Log: a.log,
	}, sc, r)
}

type releaser interface {
	Release(ctx context.Context, h *locking.Handle) error
}

// RerunDeps is what re-running a lost run needs: the lock backend (the
// agent's; a simulated node's link), the schedule's newest record in
// history, the scheduler, a clock and a logger.
type RerunDeps struct {
	Locker interface {
		locking.TryLocker
		releaser
	}
	LastRun func(ctx context.Context, schedule string) (cluster.Run, bool, error)
	Runner  Runner
	Now     func() time.Time
	Log     *slog.Logger
}

// Rerun re-runs lost run r of sc (steps 2 to 4 above: the schedule's
// lock, the re-run marker, the record read again, the scheduler) if it
// may, and reports whether it handed the run to the scheduler. The
// caller checked step 1 (r is a provisional record of a node gone from
// the registry, its tick within sc's window).
func Rerun(ctx context.Context, d RerunDeps, sc Schedule, r cluster.Run) bool {
	log := d.Log.With(slog.String("schedule", sc.ID), slog.String("tick", r.Tick.UTC().Format(time.RFC3339)),
		slog.String("run_id", r.RunID), slog.String("lost_on", r.Node))
	sent := d.Now()
	h, err := d.Locker.TryLock(ctx, sc.ID, sc.TTL)
	if err != nil || h == nil {
		if err != nil {
			log.Warn("re-running a lost run: taking the schedule's lock failed", slog.Any("error", err))
		}
		return false // held: the dead node's lease lives, or a run goes on
	}
	release := func(why string) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := d.Locker.Release(rctx, h); err != nil {
			log.Warn("re-running a lost run: releasing the schedule's lock failed", slog.String("why", why), slog.Any("error", err))
		}
	}
	// The marker outlives the tick's window on every node's clock: no
	// node re-runs the run after it expired.
	ttl := max(r.Tick.Add(sc.RerunWindow).Sub(sent), 0) + sc.TTL + time.Minute
	marker, err := d.Locker.TryLock(ctx, locking.RerunKey(sc.ID, r.Tick), ttl)
	if err != nil || marker == nil {
		if err != nil {
			log.Warn("re-running a lost run: taking its re-run marker failed", slog.Any("error", err))
		}
		release("the run was re-run already") // or is being; or the marker's answer was lost: not re-run
		return false
	}
	// From here, a re-run not handed to the scheduler gives the marker
	// back before the schedule's lock, which it still holds: no node can
	// have taken either meanwhile, and a later look may re-run the run.
	giveUp := func(why string) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := d.Locker.Release(rctx, marker); err != nil {
			log.Warn("re-running a lost run: giving its re-run marker back failed", slog.String("why", why), slog.Any("error", err))
		}
		release(why)
	}
	cur, ok, err := d.LastRun(ctx, sc.ID)
	if err != nil || !ok || cur.RunID != r.RunID || cur.Result != cluster.ResultRunning {
		// Its node recorded the run's end after all (or a newer run came),
		// or history did not answer: not re-run now.
		giveUp("the run is not lost, or history did not answer")
		return false
	}
	attempt := max(r.Attempts, 1) + 1
	err = d.Runner.RunManual(scheduler.Manual{ID: sc.ID, Tick: r.Tick, RunID: r.RunID, Handle: h, Sent: sent,
		By:    fmt.Sprintf("rerun: node %s was lost", r.Node),
		Rerun: &scheduler.Rerun{Attempt: attempt, Start: r.StartedAt}})
	if err != nil {
		log.Warn("re-running a lost run: the scheduler refused it", slog.Any("error", err))
		giveUp("the scheduler refused the re-run")
		return false
	}
	log.Warn("re-running a run whose node was lost", slog.Int("attempt", attempt))
	return true
}
