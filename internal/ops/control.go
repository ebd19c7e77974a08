package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/locking"
)

// Errors of stop, and of a backend's refusal.
var (
	// ErrPermission: the backend refused the operation to the user it was
	// opened with (a read-only role, an ACL): locking.ErrPermission, named
	// here so that the API and the CLI need not import the lock contract.
	ErrPermission = locking.ErrPermission
	// ErrNotRunning: stop found no run of the schedule going on (exit 1,
	// 409).
	ErrNotRunning = errors.New("ops: nothing of this schedule is running")
	// ErrNotStopped: no running node acted on the stop within the wait
	// (exit 1, 504); the request stays until its expiry, so a node that
	// polls late still stops what it ran then.
	ErrNotStopped = errors.New("ops: no node stopped the run in time")
)

// StopAnswer is what stop answers: the runs the nodes stopped.
type StopAnswer struct {
	Schedule string            `json:"schedule"`
	Stopped  []cluster.Stopped `json:"stopped"`
}

// CancelAnswer is what cancel answers: how many queued requests (each
// trigger, each backfill tick) were dropped.
type CancelAnswer struct {
	Schedule  string `json:"schedule"`
	Cancelled int    `json:"cancelled"`
}

// LastAction is a schedule's newest operator act, as status shows it.
type LastAction = cluster.Action

type byKey struct{}

// WithBy returns ctx naming who asks, recorded with what the Service does
// for that call instead of Options.By: the API names each client.
func WithBy(ctx context.Context, by string) context.Context {
	return context.WithValue(ctx, byKey{}, by)
}

// byOf is who asks in ctx.
func (s *Service) byOf(ctx context.Context) string {
	if by, ok := ctx.Value(byKey{}).(string); ok && by != "" {
		return by
	}
	return s.by
}

// record keeps who did what to schedule id. The act is done by then: a
// record that fails says so, naming the act, and the caller reports it.
func (s *Service) record(ctx context.Context, id, kind, note string) error {
	return s.recordAction(ctx, cluster.Action{Schedule: id, Kind: kind, Note: note})
}

// recordAction is record for an act with more to it than a note.
func (s *Service) recordAction(ctx context.Context, a cluster.Action) error {
	id, kind := a.Schedule, a.Kind
	a.By, a.At = s.byOf(ctx), s.now().UTC()
	if err := s.store.RecordAction(ctx, a, cluster.DefaultActionsKept); err != nil {
		return backendErr(fmt.Sprintf("%s of %q done, but recording who did it", kind, id), err)
	}
	return nil
}

// stopKeep is how long a stop request lives past its caller's wait: a
// node that was slow to poll still stops what it ran when it asks.
const stopKeep = 30 * time.Second

// Stop stops the runs of schedule id going on now, on whichever node runs
// them: it asks the cluster (a stop request the running nodes poll for,
// once a second) and waits up to wait until every node that was running
// one has acted. It fails with ErrNotRunning when no live node announced
// a run of it (a run started within the last second may not be announced
// yet), and with ErrNotStopped when no node acted within wait (the answer
// then lists what was stopped, if anything).
func (s *Service) Stop(ctx context.Context, id string, wait time.Duration) (StopAnswer, error) {
	if _, err := s.lookup(id); err != nil {
		return StopAnswer{}, err
	}
	if s.store == nil {
		return StopAnswer{}, ErrNoBackend
	}
	ans := StopAnswer{Schedule: id, Stopped: []cluster.Stopped{}}
	ns, err := s.store.Nodes(ctx)
	if err != nil {
		return ans, backendErr("listing nodes", err)
	}
	running := map[string]bool{} // the nodes that run it
	var runIDs []string
	for _, n := range ns {
		for _, r := range n.Running {
			if r.Schedule == id {
				running[n.NodeID] = true
				runIDs = append(runIDs, r.RunID)
			}
		}
	}
	if len(running) == 0 {
		return ans, fmt.Errorf("%w: %q", ErrNotRunning, id)
	}
	req := cluster.StopRequest{ID: newID(), Schedule: id, RunIDs: runIDs, By: s.byOf(ctx), At: s.now().UTC()}
	if err := s.store.RequestStop(ctx, req, wait+stopKeep); err != nil {
		return ans, backendErr("asking the nodes to stop the run", err)
	}
	if err := s.record(ctx, id, cluster.ActionStop, ""); err != nil {
		return ans, err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	for {
		rs, err := s.store.StopRequests(ctx)
		if err != nil {
			return ans, backendErr("asking whether the nodes stopped the run", err)
		}
		for _, r := range rs {
			if r.ID == req.ID {
				ans.Stopped = r.Stopped
			}
		}
		if everyNodeActed(running, ans.Stopped) {
			return ans, nil
		}
		select {
		case <-ctx.Done():
			return ans, backendErr("waiting for the nodes to stop the run", ctx.Err())
		case <-deadline.C:
			if len(ans.Stopped) > 0 {
				return ans, nil // some stopped: a node that ran it may have ended meanwhile
			}
			return ans, fmt.Errorf("%w: %q, within %v", ErrNotStopped, id, wait)
		case <-tick.C:
		}
	}
}

// everyNodeActed reports whether each node of running stopped a run.
func everyNodeActed(running map[string]bool, stopped []cluster.Stopped) bool {
	acted := map[string]bool{}
	for _, st := range stopped {
		acted[st.Node] = true
	}
	for node := range running {
		if !acted[node] {
			return false
		}
	}
	return true
}

// Cancel drops the triggers and backfill ticks queued for schedule id: a
// run already taken by a node is not queued any more (stop stops it).
func (s *Service) Cancel(ctx context.Context, id string) (CancelAnswer, error) {
	if _, err := s.lookup(id); err != nil {
		return CancelAnswer{}, err
	}
	if s.store == nil {
		return CancelAnswer{}, ErrNoBackend
	}
	n, err := s.store.CancelQueue(ctx, id)
	if err != nil {
		return CancelAnswer{}, backendErr("dropping the queue", err)
	}
	ans := CancelAnswer{Schedule: id, Cancelled: n}
	return ans, s.record(ctx, id, cluster.ActionCancel, fmt.Sprintf("%d queued", n))
}

// StreakActions is how many of a schedule's newest acts are read for its
// last resume (StreakSince): status reads them anyway for last_action, and
// a resume further back than that is older than any streak worth
// counting from it.
const StreakActions = 20

// StreakSince is when a schedule's failure streak may begin: the
// StreakFrom of its newest resume among acts (newest first), zero when
// there is none (or history held no run when it was resumed). A resume
// starts a new streak, so the first failure after one does not pause the
// schedule again "after N failed runs in a row".
func StreakSince(acts []cluster.Action) time.Time {
	for _, a := range acts {
		if a.Kind == cluster.ActionResume {
			if a.StreakFrom != nil {
				return *a.StreakFrom
			}
			return time.Time{}
		}
	}
	return time.Time{}
}
