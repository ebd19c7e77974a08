package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// Action is an operator's act on a schedule, as history keeps it: who
// paused, resumed, triggered, backfilled, stopped or cancelled it, and
// when. The JSON names are the contract of `status` (last_action).
type Action struct {
	Schedule string    `json:"schedule"`
	Kind     string    `json:"kind"` // one of the Action kinds below
	By       string    `json:"by"`   // CLI: user@host; API: "api" and the client address
	At       time.Time `json:"at"`   // on the asking side's clock
	Note     string    `json:"note"` // the pause note, a backfill's range
	// StreakFrom, on a resume, is the start of the newest run history held
	// when the schedule was resumed (null: none, or not a resume): the
	// failure streak counts only runs that started after it. A start the
	// nodes stamped, not At: the asking side's clock may run far ahead or
	// behind the nodes', and a resume stamped a day ahead would switch
	// pause_after_failures off for that day.
	StreakFrom *time.Time `json:"streak_from"`
}

// The kinds of an Action.
const (
	ActionPause    = "pause"
	ActionResume   = "resume"
	ActionTrigger  = "trigger"
	ActionBackfill = "backfill"
	ActionStop     = "stop"
	ActionCancel   = "cancel"
)

// DefaultActionsKept is how many actions per schedule history keeps.
const DefaultActionsKept = 50

// StopRequest asks the nodes that run a schedule to stop the runs it
// names: each node stops those of them going on there when it sees the
// request, and adds what it stopped to Stopped. `stop` waits for that. It
// names the runs (as the nodes announced them) rather than "whatever runs":
// a node that starts a run of the schedule after the stop was asked, and
// only then polls (nodes with nothing running do not), must not stop it.
type StopRequest struct {
	ID       string    `json:"id"` // random, unique
	Schedule string    `json:"schedule"`
	RunIDs   []string  `json:"run_ids"`
	By       string    `json:"by"`
	At       time.Time `json:"at"`
	// Reason is why the runs are stopped: "" an operator's stop,
	// StopReplace a later tick of the schedule (overlap = "replace"),
	// whose runs end recorded replaced.
	Reason string `json:"reason,omitempty"`
	// Stopped is what the nodes stopped, filled by StopActed; empty in a
	// RequestStop.
	Stopped []Stopped `json:"stopped"`
}

// StopReplace is a StopRequest's Reason when a later tick of the
// schedule asks (overlap = "replace").
const StopReplace = "replace"

// Stopped is a run a node stopped for a StopRequest.
type Stopped struct {
	Node  string    `json:"node"`
	Tick  time.Time `json:"tick"`
	RunID string    `json:"run_id"`
}

// Control is the part of the cluster state that operators' acts leave:
// who did what (RecordAction, Actions), stop requests (RequestStop,
// StopRequests, StopActed) and the dropping of a schedule's queue
// (CancelQueue). Every Store implements it.
type Control interface {
	// RecordAction appends a to its schedule's actions, keeping the newest
	// keep (trimmed as RecordRuns trims: never more than 2×keep). The note
	// and by are cut as a run's error is (BoundAction).
	RecordAction(ctx context.Context, a Action, keep int) error
	// Actions returns up to limit actions of schedule, newest first.
	Actions(ctx context.Context, schedule string, limit int) ([]Action, error)

	// RequestStop stores r for ttl (from now, the store's clock): the
	// nodes see it in StopRequests meanwhile. A request stored again
	// (same ID: a resend) is stored once.
	RequestStop(ctx context.Context, r StopRequest, ttl time.Duration) error
	// StopRequests returns the stop requests not expired, each with what
	// the nodes stopped for it so far, oldest first. Nodes poll it.
	StopRequests(ctx context.Context) ([]StopRequest, error)
	// StopActed adds what node stopped for request id to it (a node acts
	// once per request; acting again replaces its part). A request
	// expired or unknown is left alone (nil error).
	StopActed(ctx context.Context, id, node string, stopped []Stopped) error

	// CancelQueue drops every request queued for schedule, triggers and
	// backfill ticks alike, and reports how many it dropped. A request a
	// node took already is not in the queue: it runs (stop stops it). A
	// backfill tick running when its queue is dropped runs to its end;
	// its Done is then a no-op.
	CancelQueue(ctx context.Context, schedule string) (int, error)
}

// CheckAction validates an action to record; backends call it first.
func CheckAction(a Action) error {
	if err := locking.CheckKey(a.Schedule); err != nil {
		return fmt.Errorf("%w: action on schedule %q: %w", ErrInvalid, a.Schedule, err)
	}
	if a.Kind == "" {
		return fmt.Errorf("%w: action on %q has no kind", ErrInvalid, a.Schedule)
	}
	return nil
}

// BoundAction cuts an action's free text as Bound cuts a run's error.
func BoundAction(a Action) Action {
	a.Note = Bound(Run{Error: a.Note}).Error
	a.By = Bound(Run{Error: a.By}).Error
	a.Kind = Bound(Run{Error: a.Kind}).Error
	return a
}

// CheckStop validates a stop request; backends call it first.
func CheckStop(r StopRequest, ttl time.Duration) error {
	if err := locking.CheckKey(r.Schedule); err != nil {
		return fmt.Errorf("%w: stop of schedule %q: %w", ErrInvalid, r.Schedule, err)
	}
	if r.ID == "" {
		return fmt.Errorf("%w: stop of %q has no id", ErrInvalid, r.Schedule)
	}
	if len(r.RunIDs) == 0 {
		return fmt.Errorf("%w: stop of %q names no run", ErrInvalid, r.Schedule)
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: stop of %q: ttl %v below 1ms", ErrInvalid, r.Schedule, ttl)
	}
	return nil
}
