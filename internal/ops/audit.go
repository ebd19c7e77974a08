package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The audit (`audit`, GET /api/v1/schedules/{id}/audit, GET
// /api/v1/audit, the page's strip of ticks): every tick a schedule's spec
// produces in a range, with its fate, from one read of its runs, one of
// its skip records and one of its tick mark.

// The fates of a tick (the `fate` of `audit`, a contract).
const (
	// FateRan: a run of the tick is recorded (its result may be running).
	FateRan = "ran"
	// FateSkipped: the tick was consumed without a run: a skip record
	// (paused, missed, overlap, stopped) or a grant that ran nowhere
	// (not_run).
	FateSkipped = "skipped"
	// FateLost: the tick mark passed the tick, yet neither a run nor a skip
	// of it is recorded.
	FateLost = "lost"
	// FatePending: not decided yet (reason not_due, undecided or
	// recording).
	FatePending = "pending"
	// FateUnknown: before the history kept (reason before_history), or a
	// node_local schedule's tick nothing recorded (reason node_local).
	FateUnknown = "unknown"
)

// The reasons of the fates other than skipped, which takes a skip's
// reason (cluster.SkipPaused, ...) or cluster.ResultNotRun's not_run.
const (
	ReasonNotRun        = "not_run"        // skipped: granted, ran nowhere
	ReasonNotDue        = "not_due"        // pending: the tick is still ahead
	ReasonUndecided     = "undecided"      // pending: the mark has not reached it
	ReasonRecording     = "recording"      // pending: decided within AuditGrace, records may follow
	ReasonBeforeHistory = "before_history" // unknown: before the oldest record kept
	ReasonNodeLocal     = "node_local"     // unknown: no mark tells whether it was decided
	// ReasonCalendar: skipped, its date among the schedule's except
	// dates. Such a tick is no tick to the scheduler (no node fires it,
	// no catch-up runs it); audit lists it so that an operator sees the
	// holiday kept.
	ReasonCalendar = "calendar"
	// ReasonNoNode: skipped, the schedule is targeted (nodes) and no
	// live node has its tags, so none asked for the tick. Judged by the
	// nodes live at the audit: a node that had them and left since makes
	// its undecided ticks read no_node too.
	ReasonNoNode = "no_node"
)

// MaxAuditTicks bounds the ticks of one schedule's audit.
const MaxAuditTicks = 10000

// MaxAuditSummaryTicks bounds the ticks one schedule may count in a
// summary, which keeps no rows: a schedule firing every second has 86,400
// in the default day.
const MaxAuditSummaryTicks = 100000

// AuditGrace is how long after a tick its records may still be on their
// way: a node writes them in batches after the decision (every 250ms),
// each write bounded by 5 s (internal/agent), so 15 s leaves room for a
// slow one. A tick within it with no record is pending, not lost. (A tick
// decided late, or passed over by a later decision — recorded stopped
// then — can read lost for the few seconds its record takes: the alert
// waits for it to stay lost.)
const AuditGrace = 15 * time.Second

// AuditDefaultTicks is how many ticks an audit without --from covers.
const AuditDefaultTicks = 100

// AuditSummarySpan is the range of a summary without --from.
const AuditSummarySpan = 24 * time.Hour

// notRun is a run record of a grant that ran nowhere.
const notRun = string(scheduler.ResultNotRun)

// AuditTick is one tick and its fate. Every field is always present in
// its JSON, null when it does not apply.
type AuditTick struct {
	Schedule string    `json:"schedule"`
	Tick     time.Time `json:"tick"`
	Fate     string    `json:"fate"`
	Reason   *string   `json:"reason"`
	Node     *string   `json:"node"`
	RunID    *string   `json:"run_id"`
	Fence    *int64    `json:"fence"`
	// LatenessSeconds is the run's start minus its tick.
	LatenessSeconds *float64 `json:"lateness_seconds"`
	DurationSeconds *float64 `json:"duration_seconds"`
	Result          *string  `json:"result"`
	Attempts        *int     `json:"attempts"`
	Manual          *bool    `json:"manual"`
	// Note is a skip's note (a pause's note, why a tick was stopped).
	Note *string `json:"note"`
	// MarkAhead is the schedule's tick mark when it lies ahead of the
	// clock (as Schedule.MarkAhead): no tick runs before it. Null otherwise.
	MarkAhead *time.Time `json:"mark_ahead"`
}

// AuditSummary counts one schedule's fates over a range.
type AuditSummary struct {
	Schedule  string     `json:"schedule"`
	Ran       int        `json:"ran"`
	Skipped   int        `json:"skipped"`
	Lost      int        `json:"lost"`
	Pending   int        `json:"pending"`
	Unknown   int        `json:"unknown"`
	MarkAhead *time.Time `json:"mark_ahead"`
}

// Audit returns the fate of every tick of schedule id in (from, to], in
// tick order, with the manual runs of the range whose tick is none of the
// spec's as extra rows. A zero to is now; a zero from is the
// AuditDefaultTicks-th tick before to.
func (s *Service) Audit(ctx context.Context, id string, from, to time.Time) ([]AuditTick, error) {
	d, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	if d.spec == nil {
		return nil, fmt.Errorf("%w: schedule %q has no valid cron", ErrInvalid, id)
	}
	if s.store == nil {
		return nil, ErrNoBackend
	}
	nodes, err := s.nodeTimes(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	ref := auditRef{mark: backendNowAtMost(now, nodes), nodes: nodes}
	if to.IsZero() {
		to = now
	}
	if from.IsZero() {
		from = ticksBefore(d.spec, to, AuditDefaultTicks)
	}
	if !from.Before(to) {
		return nil, fmt.Errorf("%w: --from %s is not before --to %s", ErrInvalid, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	out := []AuditTick{}
	err = s.audit(ctx, d, from, to, now, ref, MaxAuditTicks, func(t AuditTick) { out = append(out, t) })
	return out, err
}

// AuditSummary counts every schedule's fates in (from, to], schedules
// with a lost tick first (most lost first), then by id. A zero to is now;
// a zero from is AuditSummarySpan before to. It reads each schedule's
// history, a few at a time.
func (s *Service) AuditSummary(ctx context.Context, from, to time.Time) ([]AuditSummary, error) {
	if s.store == nil {
		return nil, ErrNoBackend
	}
	nodes, err := s.nodeTimes(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	ref := auditRef{mark: backendNowAtMost(now, nodes), nodes: nodes}
	if to.IsZero() {
		to = now
	}
	if from.IsZero() {
		from = to.Add(-AuditSummarySpan)
	}
	if !from.Before(to) {
		return nil, fmt.Errorf("%w: --from %s is not before --to %s", ErrInvalid, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	defs := s.schedules()
	out := make([]AuditSummary, len(defs))
	errs := make([]error, len(defs))
	sem := make(chan struct{}, pauseFanOut)
	var wg sync.WaitGroup
	for i, d := range defs {
		out[i].Schedule = d.id
		if d.spec == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			sum := &out[i]
			errs[i] = s.audit(ctx, d, from, to, now, ref, MaxAuditSummaryTicks, func(t AuditTick) {
				sum.MarkAhead = t.MarkAhead
				switch t.Fate {
				case FateRan:
					sum.Ran++
				case FateSkipped:
					sum.Skipped++
				case FateLost:
					sum.Lost++
				case FatePending:
					sum.Pending++
				default:
					sum.Unknown++
				}
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b AuditSummary) int {
		if a.Lost != b.Lost {
			return b.Lost - a.Lost
		}
		return strings.Compare(a.Schedule, b.Schedule)
	})
	return out, nil
}

// nodeTimes reads the live nodes' announcement times, for
// backendNowAtMost.
func (s *Service) nodeTimes(ctx context.Context) ([]Node, error) {
	ns, err := s.store.Nodes(ctx)
	if err != nil {
		return nil, backendErr("listing nodes", err)
	}
	nodes := make([]Node, len(ns))
	for i, n := range ns {
		nodes[i] = Node{LastSeen: n.LastSeen, Tags: n.Tags}
	}
	return nodes, nil
}

// ticksBefore is the n-th tick of spec before to (so that (it, to] holds
// n ticks), or to minus a day when spec has fewer.
func ticksBefore(spec cronspec.Spec, to time.Time, n int) time.Time {
	t := to
	for range n {
		p := cronspec.Prev(spec, t.Add(-time.Nanosecond), lookBack)
		if p.IsZero() {
			if t.Equal(to) {
				return to.Add(-24 * time.Hour)
			}
			return t.Add(-time.Nanosecond)
		}
		t = p
	}
	return t.Add(-time.Nanosecond)
}

// auditReadLimit is how many runs and skips of a schedule an audit reads:
// a history holds at most 2×keep of each.
func (s *Service) auditReadLimit() int { return 2 * s.keep }

// audit emits the fate of every tick of d in (from, to], and the extra
// rows of its manual runs there, in tick order; more than maxTicks of the
// spec's is ErrInvalid.
//
// now is this node's clock: what is due, and AuditGrace, count from it.
// ref.mark is backendNowAtMost's bound on the backend's clock, up to
// nodeSeenSlack ahead of now: only a mark past it is ahead. Taken for now,
// it would make a tick decided within the last nodeSeenSlack, whose
// records may still be on their way, read lost.
// auditRef is what an audit reads once for all its schedules: the bound
// on the backend's clock (backendNowAtMost) and the live nodes, whose tags
// say whether a targeted schedule had a node to run it (reason no_node).
type auditRef struct {
	mark  time.Time
	nodes []Node
}

func (s *Service) audit(ctx context.Context, d def, from, to, now time.Time, ref auditRef, maxTicks int, emit func(AuditTick)) error {
	return s.auditLimit(ctx, d, from, to, now, ref, maxTicks, s.auditReadLimit(), emit)
}

// auditLimit is audit reading at most limit runs and limit skips: when a
// read comes back full, what it did not reach is before the horizon
// (unknown, never lost).
func (s *Service) auditLimit(ctx context.Context, d def, from, to, now time.Time, ref auditRef, maxTicks, limit int, emit func(AuditTick)) error {
	// The ticks with the except dates lifted: those dates' ticks are rows
	// too, skipped by the calendar.
	spec, excepted, hasExcept := cronspec.Excepted(d.spec)
	var ticks []time.Time
	var calendar map[int64]bool
	for t := spec.Next(from); !t.IsZero() && !t.After(to); t = spec.Next(t) {
		if len(ticks) == maxTicks {
			n := len(ticks)
			for ; !t.IsZero() && !t.After(to) && n < 10*maxTicks; t = spec.Next(t) {
				n++
			}
			more := ""
			if n == 10*maxTicks {
				more = " or more"
			}
			return fmt.Errorf("%w: the range holds %d%s ticks of %q, more than the %d an audit covers; audit a shorter range",
				ErrInvalid, n, more, d.id, maxTicks)
		}
		ticks = append(ticks, t.UTC())
		if hasExcept && excepted(t) {
			if calendar == nil {
				calendar = map[int64]bool{}
			}
			calendar[t.UnixNano()] = true
		}
	}
	runs, err := s.store.Runs(ctx, d.id, limit)
	if err != nil {
		return backendErr("reading history", err)
	}
	skips, err := s.store.Skips(ctx, d.id, limit)
	if err != nil {
		return backendErr("reading skip records", err)
	}
	local := d.hint == string(hints.NodeLocal)
	noNode := d.noNode(ref.nodes)
	var mark time.Time
	var marked bool
	var ahead *time.Time
	if !local {
		if mark, marked, err = s.store.Mark(ctx, d.id); err != nil {
			return backendErr("reading the schedule's tick mark", err)
		}
		if marked && mark.Sub(ref.mark) > s.maxSkew {
			m := mark.UTC()
			ahead = &m
		}
	}

	// The best run of each tick: a final record over a provisional one, a
	// run over a grant that ran nowhere; the newest of equals (runs come
	// newest first).
	best := map[int64]cluster.Run{}
	for _, r := range runs {
		k := r.Tick.UnixNano()
		if have, ok := best[k]; !ok || runRank(r) > runRank(have) {
			best[k] = r
		}
	}
	skipOf := make(map[int64]cluster.Skip, len(skips))
	for _, k := range skips {
		if _, ok := skipOf[k.Tick.UnixNano()]; !ok {
			skipOf[k.Tick.UnixNano()] = k
		}
	}
	horizon, anyRecord := auditHorizon(runs, skips, min(s.keep, limit))

	fate := func(t time.Time) AuditTick {
		row := AuditTick{Schedule: d.id, Tick: t.UTC(), MarkAhead: ahead}
		if r, ok := best[t.UnixNano()]; ok {
			if r.Result == notRun {
				row.Fate, row.Reason, row.Node = FateSkipped, str(ReasonNotRun), nonEmpty(r.Node)
				row.RunID, row.Note = nonEmpty(r.RunID), nonEmpty(r.Error)
				return row
			}
			return ranRow(row, r)
		}
		if k, ok := skipOf[t.UnixNano()]; ok {
			row.Fate, row.Reason, row.Node, row.Note = FateSkipped, str(k.Reason), nonEmpty(k.Node), nonEmpty(k.Note)
			return row
		}
		if calendar[t.UnixNano()] { // after the records: a date excepted since it ran
			row.Fate, row.Reason = FateSkipped, str(ReasonCalendar)
			return row
		}
		row.Fate = FatePending
		switch {
		case t.After(now):
			row.Reason = str(ReasonNotDue)
		case noNode && now.Sub(t) >= AuditGrace && (local && anyRecord && !t.Before(horizon) || !local && (!marked || mark.Before(t))):
			// Nobody asked: no node could. (A mark past t says a node
			// decided it: then the tick is lost or recorded as usual;
			// within the grace, a node just come may still ask.)
			row.Fate, row.Reason = FateSkipped, str(ReasonNoNode)
		case !local && (!marked || mark.Before(t)):
			row.Reason = str(ReasonUndecided)
		case !anyRecord || t.Before(horizon):
			row.Fate, row.Reason = FateUnknown, str(ReasonBeforeHistory)
		case now.Sub(t) < AuditGrace:
			row.Reason = str(ReasonRecording)
		case local:
			row.Fate, row.Reason = FateUnknown, str(ReasonNodeLocal)
		default:
			row.Fate, row.Reason = FateLost, nil
		}
		return row
	}

	// Manual runs at a tick the spec never produces (triggers): extra rows.
	inSpec := make(map[int64]bool, len(ticks))
	for _, t := range ticks {
		inSpec[t.UnixNano()] = true
	}
	var extra []cluster.Run
	for _, r := range best {
		if r.Manual && r.Tick.After(from) && !r.Tick.After(to) && !inSpec[r.Tick.UnixNano()] {
			extra = append(extra, r)
		}
	}
	slices.SortFunc(extra, func(a, b cluster.Run) int { return a.Tick.Compare(b.Tick) })

	for _, t := range ticks {
		for len(extra) > 0 && extra[0].Tick.Before(t) {
			emit(fate(extra[0].Tick))
			extra = extra[1:]
		}
		emit(fate(t))
	}
	for _, r := range extra {
		emit(fate(r.Tick))
	}
	return nil
}

// auditHorizon is the earliest tick the records read account for: ticks
// before the oldest record are from before the schedule (or its history)
// existed; and once a history may have been trimmed (keep or more
// records), from before the oldest kept. Runs are trimmed oldest start
// first, so a trimmed run's tick is at or before the oldest kept start;
// skips are trimmed oldest tick first.
func auditHorizon(runs []cluster.Run, skips []cluster.Skip, keep int) (horizon time.Time, ok bool) {
	for _, r := range runs {
		if !ok || r.Tick.Before(horizon) {
			horizon, ok = r.Tick, true
		}
	}
	for _, k := range skips {
		if !ok || k.Tick.Before(horizon) {
			horizon, ok = k.Tick, true
		}
	}
	if len(runs) >= keep {
		oldest := runs[0].StartedAt
		for _, r := range runs {
			if r.StartedAt.Before(oldest) {
				oldest = r.StartedAt
			}
		}
		horizon = maxTime(horizon, oldest.Add(time.Nanosecond))
	}
	if len(skips) >= keep {
		horizon = maxTime(horizon, skips[len(skips)-1].Tick)
	}
	return horizon, ok
}

// runRank orders the records of one tick: a final record, then a grant
// that ran nowhere, then a provisional record.
func runRank(r cluster.Run) int {
	switch {
	case r.Result == cluster.ResultRunning && r.Attempts == 0:
		return 0
	case r.Result == notRun:
		return 1
	default:
		return 2
	}
}

func ranRow(row AuditTick, r cluster.Run) AuditTick {
	row.Fate = FateRan
	row.Node, row.RunID, row.Result = nonEmpty(r.Node), nonEmpty(r.RunID), nonEmpty(r.Result)
	fence, attempts, manual := r.Fence, r.Attempts, r.Manual
	late := float64(r.StartedAt.Sub(r.Tick)) / 1e9
	row.Fence, row.Attempts, row.Manual, row.LatenessSeconds = &fence, &attempts, &manual, &late
	if runRank(r) > 0 { // a provisional record has no duration yet
		dur := float64(r.Duration) / 1e9
		row.DurationSeconds = &dur
	}
	return row
}

func str(s string) *string { return &s }

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// The list page marks the schedules with a lost tick in the last
// AuditSummarySpan. That is a summary of every schedule, a read of each
// one's whole history (up to 2×keep runs with their output tails): at
// 10,000 schedules far too much for every load of a page that refreshes
// every few seconds. So the Service keeps the last answer for
// lostCacheTTL, or ten times as long as it took to compute when that is
// longer (a large fleet on a slow backend is read less often), and
// computes one at a time: loads that find it stale while it is computed
// wait for that one rather than starting their own.
const lostCacheTTL = 15 * time.Second

type lostCache struct {
	at, until time.Time
	lost      map[string]int
	err       error // a failure is kept as long: a backend that cannot answer is not asked on every load
}

// LostRecently returns the schedules with a lost tick in the last
// AuditSummarySpan and how many, from a cache at most lostCacheTTL old
// (longer for a summary slow to compute), and the time it was computed.
func (s *Service) LostRecently(ctx context.Context) (map[string]int, time.Time, error) {
	s.lostMu.Lock()
	defer s.lostMu.Unlock()
	start := time.Now()
	if start.Before(s.lost.until) {
		return s.lost.lost, s.lost.at, s.lost.err
	}
	sums, err := s.AuditSummary(ctx, time.Time{}, time.Time{})
	if err != nil {
		if ctx.Err() == nil {
			s.lost = lostCache{until: time.Now().Add(lostCacheTTL), err: err}
		}
		return nil, time.Time{}, err
	}
	lost := map[string]int{}
	for _, sum := range sums {
		if sum.Lost > 0 {
			lost[sum.Schedule] = sum.Lost
		}
	}
	took := time.Since(start)
	s.lost = lostCache{at: s.now(), until: time.Now().Add(max(lostCacheTTL, 10*took)), lost: lost}
	return lost, s.lost.at, nil
}

// LostSpan is the recent window LostTicks audits: the last 15 minutes, or
// a schedule's last two ticks when they go further back (an hourly
// schedule's lost tick stays counted for two hours, long enough for an
// alert to see it).
const LostSpan = 15 * time.Minute

// LostTicks audits the locked schedules among ids over their recent
// window (LostSpan) and returns those with a lost tick, and how many: what
// bext_scheduler_ticks_lost exports. See LostTickTimes.
func (s *Service) LostTicks(ctx context.Context, ids []string) (map[string]int, error) {
	times, err := s.LostTickTimes(ctx, ids)
	if times == nil {
		return nil, err
	}
	lost := make(map[string]int, len(times))
	for id, ts := range times {
		lost[id] = len(ts)
	}
	return lost, err
}

// LostTickTimes audits the locked schedules among ids over their recent
// window (LostSpan) and returns those with a lost tick, and which ticks
// (in tick order): the lost event tells each once. It reads each schedule's newest runs
// and skips, only as many as its window can hold (twice its ticks there,
// plus a few for manual runs), and its mark: three small reads a schedule.
// Unknown ids and node_local schedules are passed over.
func (s *Service) LostTickTimes(ctx context.Context, ids []string) (map[string][]time.Time, error) {
	if s.store == nil {
		return nil, ErrNoBackend
	}
	nodes, err := s.nodeTimes(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	ref := auditRef{mark: backendNowAtMost(now, nodes), nodes: nodes}
	lost := map[string][]time.Time{}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, pauseFanOut) // a few schedules at a time, as AuditSummary
	for _, id := range ids {
		d, err := s.lookup(id)
		if err != nil || d.spec == nil || d.hint == string(hints.NodeLocal) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			from := now.Add(-LostSpan)
			if t := ticksBefore(d.spec, now, 2); t.Before(from) {
				from = t
			}
			n := 0
			for t := d.spec.Next(from); !t.IsZero() && !t.After(now) && n <= MaxAuditTicks; t = d.spec.Next(t) {
				n++
			}
			limit := min(s.auditReadLimit(), 2*n+8)
			var ticks []time.Time
			err := s.auditLimit(ctx, d, from, now, now, ref, MaxAuditTicks, limit, func(t AuditTick) {
				if t.Fate == FateLost {
					ticks = append(ticks, t.Tick)
				}
			})
			mu.Lock()
			defer mu.Unlock()
			if len(ticks) > 0 {
				lost[d.id] = ticks
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("auditing %q: %w", d.id, err))
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return lost, errors.Join(errs...)
}
