package agent

import (
	"context"
	"crypto/rand"
	"log/slog"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
)

// overlap = "replace" across nodes: a tick of such a schedule that finds
// its lock held asks (scheduler.Options.ReplaceRuns) for the runs of the
// schedule's earlier ticks to stop. The agent reads which runs those are
// from the nodes' announcements, as `stop` does, and stores a stop
// request naming them, of Reason cluster.StopReplace; their node's
// pollStops stops them through ReplaceRun (recorded replaced). The tick
// meanwhile waits for the lock (scheduler/queue.go).

// replaceAsk is one ReplaceRuns call.
type replaceAsk struct {
	schedule string
	at       time.Time
}

// replaceKeep is how long a replace's stop request lives, and how long a
// run it named is not named again: the run's node polls every PollEvery.
const replaceKeep = 30 * time.Second

// ReplaceRuns asks the cluster to stop the runs of schedule's ticks
// before at (scheduler.Options.ReplaceRuns). It never blocks: an ask
// that finds the queue full is dropped, and the waiting tick asks again
// at its next try, a second later.
func (a *Agent) ReplaceRuns(schedule string, at time.Time) {
	select {
	case a.replaces <- replaceAsk{schedule, at}:
	default:
	}
}

// replacing serves ReplaceRuns until ctx ends.
func (a *Agent) replacing(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-a.replaces:
			opCtx, cancel := context.WithTimeout(ctx, max(a.opts.PollEvery, 2*time.Second))
			a.replace(opCtx, r)
			cancel()
		}
	}
}

// replace stores a stop request for the announced runs of r's schedule
// of ticks before r.at that no request named yet.
func (a *Agent) replace(ctx context.Context, r replaceAsk) {
	nodes, err := a.b.Nodes(ctx)
	if err != nil {
		a.log.Warn("replacing a run: reading the nodes failed", slog.String("schedule", r.schedule), slog.Any("error", err))
		return
	}
	now := a.opts.Now()
	if a.replaced == nil {
		a.replaced = map[string]time.Time{}
	}
	for id, until := range a.replaced {
		if now.After(until) {
			delete(a.replaced, id)
		}
	}
	var ids []string
	for _, n := range nodes {
		for _, run := range n.Running {
			if run.Schedule == r.schedule && run.Tick.Before(r.at) && a.replaced[run.RunID].IsZero() {
				ids = append(ids, run.RunID)
			}
		}
	}
	if len(ids) == 0 {
		return // none announced yet (or named already): the next try asks again
	}
	req := cluster.StopRequest{ID: rand.Text(), Schedule: r.schedule, RunIDs: ids, Reason: cluster.StopReplace,
		By: "replace: tick " + r.at.UTC().Format(time.RFC3339) + " on " + a.opts.NodeID, At: now.UTC()}
	if err := a.b.RequestStop(ctx, req, replaceKeep); err != nil {
		a.log.Warn("replacing a run: storing the stop request failed", slog.String("schedule", r.schedule), slog.Any("error", err))
		return
	}
	for _, id := range ids {
		a.replaced[id] = now.Add(replaceKeep)
	}
	a.log.Info("asked the cluster to stop the runs a later tick replaces", slog.String("schedule", r.schedule),
		slog.String("tick", r.at.UTC().Format(time.RFC3339)), slog.Any("run_ids", ids))
}
