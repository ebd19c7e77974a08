package ops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Trigger asks the cluster to run schedule id once now. It refuses at once
// (ErrRunning) when the schedule's lock is held and its overlap is skip;
// else it queues a request, which the first node to take the schedule's
// lock removes in that same step, and waits up to wait for a node to
// accept it. An answer with Accepted false means nobody took it within
// wait: the request stays queued and runs when a node does.
//
// Held and Enqueue are two steps: a regular tick that takes the lock
// between them makes the trigger wait for it (the request stays queued),
// which is what "a trigger is a run" under skip means anyway.
func (s *Service) Trigger(ctx context.Context, id string, wait time.Duration) (TriggerAnswer, error) {
	d, err := s.lookup(id)
	if err != nil {
		return TriggerAnswer{}, err
	}
	if s.store == nil {
		return TriggerAnswer{}, ErrNoBackend
	}
	if d.overlap != scheduler.OverlapAllow { // the lock is the schedule's
		held, err := s.store.Held(ctx, id)
		if err != nil {
			return TriggerAnswer{}, backendErr("checking the schedule's lock", err)
		}
		if held {
			return TriggerAnswer{}, fmt.Errorf("%w: %q", ErrRunning, id)
		}
	}
	now := s.now()
	req := cluster.Request{ID: newID(), Schedule: id, Tick: now, By: s.byOf(ctx), At: now}
	if err := s.store.Enqueue(ctx, []cluster.Request{req}); err != nil {
		return TriggerAnswer{}, backendErr("queueing the trigger", err)
	}
	ans := TriggerAnswer{Schedule: id}
	if err := s.record(ctx, id, cluster.ActionTrigger, ""); err != nil {
		return ans, err
	}
	node, err := s.awaitAccepted(ctx, id, req.ID, wait)
	if err != nil {
		return ans, err
	}
	ans.Node, ans.Accepted = node, node != ""
	return ans, nil
}

// awaitAccepted polls Accepted until a node took request reqID or wait
// is over ("" then). The store has no notification to wait on; a poll
// every 100ms is one cheap read.
func (s *Service) awaitAccepted(ctx context.Context, id, reqID string, wait time.Duration) (string, error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	for {
		node, err := s.store.Accepted(ctx, id, reqID)
		if err != nil {
			return "", backendErr("asking whether a node accepted the trigger", err)
		}
		if node != "" {
			return node, nil
		}
		select {
		case <-ctx.Done():
			return "", backendErr("waiting for a node to accept the trigger", ctx.Err())
		case <-deadline.C:
			return "", nil
		case <-tick.C:
		}
	}
}

// Pause pauses schedule id on every node from its next tick, with an
// optional note and end time (which must lie ahead).
func (s *Service) Pause(ctx context.Context, id string, req PauseRequest) (PauseAnswer, error) {
	if _, err := s.lookup(id); err != nil {
		return PauseAnswer{}, err
	}
	if s.store == nil {
		return PauseAnswer{}, ErrNoBackend
	}
	p := locking.Pause{Paused: true, Note: req.Note}
	if req.Until != nil && !req.Until.IsZero() {
		if !req.Until.After(s.now()) {
			return PauseAnswer{}, fmt.Errorf("%w: until %s is not in the future", ErrInvalid, req.Until.UTC().Format(time.RFC3339))
		}
		p.Until = req.Until.UTC()
	}
	if len(p.Note) > maxNote {
		return PauseAnswer{}, fmt.Errorf("%w: the note is %d bytes; keep it under %d", ErrInvalid, len(p.Note), maxNote)
	}
	if err := s.store.SetPause(ctx, id, p); err != nil {
		return PauseAnswer{}, backendErr("pausing", err)
	}
	note := p.Note
	if !p.Until.IsZero() {
		note = strings.TrimSpace(note + " (until " + p.Until.Format(time.RFC3339) + ")")
	}
	return pauseAnswer(id, p), s.record(ctx, id, cluster.ActionPause, note)
}

// maxNote bounds a pause note: it is shown in tables and pages.
const maxNote = 1024

// Resume lifts schedule id's pause. The ticks skipped while paused are
// not replayed: their marks moved on as they were skipped.
func (s *Service) Resume(ctx context.Context, id string) (PauseAnswer, error) {
	if _, err := s.lookup(id); err != nil {
		return PauseAnswer{}, err
	}
	if s.store == nil {
		return PauseAnswer{}, ErrNoBackend
	}
	// The new failure streak starts after the newest run history holds
	// now, as the nodes stamped it (cluster.Action.StreakFrom).
	newest, err := s.store.Runs(ctx, id, 1)
	if err != nil {
		return PauseAnswer{}, backendErr("reading the last run before resuming", err)
	}
	if err := s.store.SetPause(ctx, id, locking.Pause{}); err != nil {
		return PauseAnswer{}, backendErr("resuming", err)
	}
	act := cluster.Action{Schedule: id, Kind: cluster.ActionResume}
	if len(newest) > 0 {
		from := newest[0].StartedAt.UTC()
		act.StreakFrom = &from
	}
	return pauseAnswer(id, locking.Pause{}), s.recordAction(ctx, act)
}

func pauseAnswer(id string, p locking.Pause) PauseAnswer {
	a := PauseAnswer{Schedule: id, Paused: p.Paused, Note: p.Note}
	if !p.Until.IsZero() {
		u := p.Until.UTC()
		a.Until = &u
	}
	return a
}

// Backfill queues each tick of schedule id from from to to (both
// included), in order, as backfill requests: nodes run them one at a
// time, each with its own tick time. More than MaxBackfillTicks ticks, or
// none, is refused; so is a second backfill while one is queued (ErrBusy),
// and a range that reaches past the ticks already decided (ErrInvalid,
// naming the latest tick a backfill may run): a later tick is its regular
// tick's to claim, and running it as a backfill too would run it twice.
func (s *Service) Backfill(ctx context.Context, id string, from, to time.Time) (BackfillAnswer, error) {
	d, err := s.lookup(id)
	if err != nil {
		return BackfillAnswer{}, err
	}
	if err := checkRange(d.id, d.spec, from, to); err != nil {
		return BackfillAnswer{}, err
	}
	if s.store == nil {
		return BackfillAnswer{}, ErrNoBackend
	}
	if err := s.checkDecided(ctx, d, from, to); err != nil {
		return BackfillAnswer{}, err
	}
	ticks, err := backfillTicks(d.id, d.spec, from, to)
	if err != nil {
		return BackfillAnswer{}, err
	}
	now := s.now()
	reqs := make([]cluster.Request, len(ticks))
	for i, t := range ticks {
		reqs[i] = cluster.Request{ID: newID(), Schedule: id, Tick: t, Backfill: true, By: s.byOf(ctx), At: now}
	}
	if err := s.store.Enqueue(ctx, reqs); err != nil {
		if errors.Is(err, cluster.ErrBusy) {
			return BackfillAnswer{}, fmt.Errorf("%w: %q", ErrBusy, id)
		}
		return BackfillAnswer{}, backendErr("queueing the backfill", err)
	}
	note := fmt.Sprintf("%d ticks, %s to %s", len(ticks), ticks[0].Format(time.RFC3339), ticks[len(ticks)-1].Format(time.RFC3339))
	return BackfillAnswer{Schedule: id, Ticks: ticks}, s.record(ctx, id, cluster.ActionBackfill, note)
}

// checkDecided refuses a range of d that holds a tick past its tick mark
// (or past now): a backfill never reaches past them, so it never runs a
// tick its regular run may still claim. A missing mark counts here as now
// minus max_clock_skew, as try-lock-tick counts it on the backend's clock;
// the node that takes the request decides on the mark it reads then.
func (s *Service) checkDecided(ctx context.Context, d def, from, to time.Time) error {
	mark, ok, err := s.store.Mark(ctx, d.id)
	if err != nil {
		return backendErr("reading the schedule's tick mark", err)
	}
	bound := locking.DecidedUntil(mark, ok, s.now())
	if !ok {
		// A first look only: the node that takes each request reads the
		// mark again and drops a tick that is not decided then; a missing
		// mark decides nothing there.
		bound = s.now().Add(-s.maxSkew)
	}
	first := d.spec.Next(maxTime(from.Add(-time.Nanosecond), bound))
	if first.IsZero() || first.After(to) {
		return nil
	}
	latest := lastTickAtOrBefore(d.spec, bound)
	if latest.IsZero() {
		return fmt.Errorf("%w: --to %s reaches past the ticks of %q decided so far (its tick mark, never past now, is at %s), and none of them can be backfilled",
			ErrInvalid, to.UTC().Format(time.RFC3339), d.id, bound.UTC().Format(time.RFC3339))
	}
	return fmt.Errorf("%w: --to %s reaches past the ticks of %q decided so far: the latest tick a backfill may run is %s (later ones, from %s, are still its regular ticks' to run)",
		ErrInvalid, to.UTC().Format(time.RFC3339), d.id, latest.UTC().Format(time.RFC3339), first.UTC().Format(time.RFC3339))
}

// lastTickAtOrBefore is spec's latest tick at or before t, zero when none
// within lookBack. A Spec only runs forward: it looks back from t over a
// span that doubles until it holds a tick, then steps forward to the last.
func lastTickAtOrBefore(spec cronspec.Spec, t time.Time) time.Time {
	for span := time.Second; span <= lookBack; span *= 2 {
		tk := spec.Next(t.Add(-span - time.Nanosecond))
		if tk.IsZero() || tk.After(t) {
			continue
		}
		for {
			next := spec.Next(tk)
			if next.IsZero() || next.After(t) {
				return tk
			}
			tk = next
		}
	}
	return time.Time{}
}

// lookBack bounds lastTickAtOrBefore: a cron spec that fires at all fires
// within any eight years (29 February, the rarest date it can name, skips
// only century years not divisible by 400); four times that is plenty.
const lookBack = 32 * 365 * 24 * time.Hour

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// BackfillTicks lists the ticks of d from from to to, both included, as
// the scheduler fires them (spread included), in UTC.
func BackfillTicks(d scheduler.Schedule, from, to time.Time) ([]time.Time, error) {
	return backfillTicks(d.ID, effectiveSpec(d), from, to)
}

// backfillTicks is BackfillTicks of schedule id firing at spec (nil: its
// cron is invalid).
func backfillTicks(id string, spec cronspec.Spec, from, to time.Time) ([]time.Time, error) {
	if err := checkRange(id, spec, from, to); err != nil {
		return nil, err
	}
	var ticks []time.Time
	for t := spec.Next(from.Add(-time.Nanosecond)); !t.IsZero() && !t.After(to); t = spec.Next(t) {
		if len(ticks) == MaxBackfillTicks {
			return nil, fmt.Errorf("%w: the range holds more than %d ticks of %q; backfill a shorter range", ErrInvalid, MaxBackfillTicks, id)
		}
		ticks = append(ticks, t.UTC())
	}
	if len(ticks) == 0 {
		return nil, fmt.Errorf("%w: no tick of %q between %s and %s", ErrInvalid, id, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	return ticks, nil
}

// checkRange checks a backfill's range and that schedule id fires.
func checkRange(id string, spec cronspec.Spec, from, to time.Time) error {
	switch {
	case from.IsZero() || to.IsZero():
		return fmt.Errorf("%w: backfill needs both --from and --to", ErrInvalid)
	case to.Before(from):
		return fmt.Errorf("%w: --to %s is before --from %s", ErrInvalid, to.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339))
	case spec == nil:
		return fmt.Errorf("%w: schedule %q has no valid cron", ErrInvalid, id)
	}
	return nil
}

// newID is a random request id (it becomes the run's id).
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	return hex.EncodeToString(b[:])
}
