package notify

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/redact"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Event kinds of the webhook's JSON, and the names [notify] events
// chooses among (a contract).
const (
	EventFailure  = "failure"  // the first failed run after a success (or ever)
	EventRecovery = "recovery" // the first successful run after failures
	EventPaused   = "paused"   // pause_after_failures paused the schedule
	EventOverrun  = "overrun"  // a run took longer than its expected_runtime
	EventTooFast  = "too_fast" // a success took less than its min_runtime
	EventMissed   = "missed"   // a tick was skipped: later than its catch-up window
	EventLost     = "lost"     // the audit found a tick that ran nowhere and was not skipped
)

// Events lists every event, in the order documentation names them.
var Events = []string{EventFailure, EventRecovery, EventPaused, EventOverrun, EventTooFast, EventMissed, EventLost}

// DefaultEvents are the events sent when [notify] events is not set: the
// failure streaks and the pauses. The others are opt-in: an every-minute
// schedule that overruns would otherwise post every minute.
var DefaultEvents = []string{EventFailure, EventRecovery, EventPaused}

// Event is the JSON body POSTed to [notify] url. The field names are the
// contract; Text is a ready-made one-line summary, which is also what
// Slack's and Mattermost's incoming webhooks display.
type Event struct {
	Event    string `json:"event"`
	Schedule string `json:"schedule"`
	Tick     string `json:"tick,omitempty"` // RFC 3339
	Node     string `json:"node"`
	Result   string `json:"result,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
	RunID    string `json:"run_id,omitempty"`
	Error    string `json:"error,omitempty"` // one line, secrets masked
	Note     string `json:"note,omitempty"`  // the pause's note
	// DurationSeconds is an overrun's or a too_fast run's duration, and
	// LimitSeconds the expected_runtime or min_runtime it crossed.
	DurationSeconds float64 `json:"duration_seconds,omitempty"`
	LimitSeconds    float64 `json:"limit_seconds,omitempty"`
	Text            string  `json:"text"`
}

// failed says whether a result breaks a streak of successes. Cancelled is
// neither: shutdown stopped the run, it says nothing of the job.
func failed(result string) bool {
	switch scheduler.RunResult(result) {
	case scheduler.ResultFailure, scheduler.ResultTimeout, scheduler.ResultLockLost:
		return true
	}
	return false
}

// historyDepth is how many runs are read to find the one before: the run
// itself may already be there, and cancelled runs are passed over.
const historyDepth = 5

// decide sends a notification when run r starts or ends a failure streak
// (sent: one was, and answered 2xx):
// it compares r with the run before it, on any node (the cluster's
// history), or on this node when there is no history to read. The webhook
// queue has one worker, so this node's decisions are taken in run order.
func (n *Notifier) decide(ctx context.Context, m *message) (sent bool) {
	r := m.run
	now := failed(string(r.Result))
	n.mu.Lock()
	prev, known := n.last[r.Schedule]
	if !known || !r.Start.Before(prev.start) {
		n.last[r.Schedule] = runState{start: r.Start, failed: now}
	}
	n.mu.Unlock()
	if known && !prev.start.Before(r.Start) {
		known = false // a later run of ours is already known: not "before"
	}
	if h := n.opts.History; h != nil {
		hctx, cancel := context.WithTimeout(ctx, n.opts.Timeout)
		runs, err := h.Runs(hctx, r.Schedule, historyDepth)
		cancel()
		if err != nil {
			n.log.Warn("reading the run history for a failure notification failed; deciding on this node's runs",
				slog.String("schedule", r.Schedule), slog.Any("error", err))
		} else if hp, ok := before(runs, r); ok && (!known || hp.StartedAt.After(prev.start)) {
			// The newer of the two: history may lag this node's own last run.
			prev, known = runState{start: hp.StartedAt, failed: failed(hp.Result)}, true
		}
	}
	wasFailing := known && prev.failed
	var kind string
	switch {
	case now && !wasFailing:
		kind = EventFailure
	case !now && wasFailing:
		kind = EventRecovery
	default:
		return false
	}
	if !n.events[kind] {
		return false // the streak is followed all the same: the other kind may be wanted
	}
	ev := Event{Event: kind, Schedule: r.Schedule, Tick: fmtTick(r.Tick), Node: r.Node,
		Result: string(r.Result), Attempts: r.Attempts, RunID: r.RunID, Error: n.errorLine(r.Err)}
	return n.post(ctx, &message{kind: kindPost, schedule: r.Schedule, url: m.url, raw: m.raw, event: &ev,
		traceparent: r.TraceParent})
}

func fmtTick(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// before returns the newest run of runs (newest first) that started
// before r and is not r itself nor cancelled nor not run (neither says
// anything of the job).
func before(runs []cluster.Run, r scheduler.RunRecord) (cluster.Run, bool) {
	for _, h := range runs {
		if h.RunID == r.RunID || h.Result == string(scheduler.ResultCancelled) || h.Result == string(scheduler.ResultReplaced) ||
			h.Result == string(scheduler.ResultNotRun) ||
			!h.StartedAt.Before(r.Start) {
			continue
		}
		return h, true
	}
	return cluster.Run{}, false
}

// text is the event's one-line summary.
func (e *Event) text() string {
	switch e.Event {
	case EventFailure:
		s := "bext-scheduler: " + e.Schedule + " " + e.Result + " on " + e.Node + " (tick " + e.Tick + ")"
		if e.Error != "" {
			s += ": " + e.Error
		}
		return s
	case EventRecovery:
		return "bext-scheduler: " + e.Schedule + " recovered: success on " + e.Node + " (tick " + e.Tick + ")"
	case EventOverrun:
		return fmt.Sprintf("bext-scheduler: %s overran: %s on %s took %s, over its expected_runtime %s (tick %s)",
			e.Schedule, e.Result, e.Node, seconds(e.DurationSeconds), seconds(e.LimitSeconds), e.Tick)
	case EventTooFast:
		return fmt.Sprintf("bext-scheduler: %s too fast: success on %s in %s, under its min_runtime %s (tick %s)",
			e.Schedule, e.Node, seconds(e.DurationSeconds), seconds(e.LimitSeconds), e.Tick)
	case EventMissed:
		return "bext-scheduler: " + e.Schedule + " missed tick " + e.Tick + " (seen on " + e.Node +
			"): later than its catch-up window, not run"
	case EventLost:
		return "bext-scheduler: " + e.Schedule + " lost tick " + e.Tick + " (audited by " + e.Node +
			"): no run and no skip of it is recorded"
	}
	return "bext-scheduler: " + e.Schedule + " paused cluster-wide: " + e.Note
}

// maxErrorLine bounds the error line of a notification.
const maxErrorLine = cluster.MaxErrorLen

var urlInText = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"'`<>]*")

// errorLine is err as a notification shows it: masked, every URL shown as
// scheme://host[:port], the first line only, bounded.
func (n *Notifier) errorLine(err error) string {
	if err == nil {
		return ""
	}
	s := n.opts.Mask(err.Error())
	s = urlInText.ReplaceAllStringFunc(s, redact.URL)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > maxErrorLine {
		s = strings.ToValidUTF8(s[:maxErrorLine], "") // a rune cut in two would make the JSON lie
	}
	return strings.TrimSpace(s)
}

// seconds prints a duration given in seconds as time.Duration does.
func seconds(s float64) string {
	return time.Duration(s * 1e9).Round(time.Millisecond).String()
}
