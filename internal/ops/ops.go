// Package ops is the one place that assembles what operators see of the
// cluster (DESIGN.md "Operating it"): schedules with their pause flag,
// next tick and last run, live nodes, config drift and run history; and
// the one place that carries out what they ask: trigger, pause, resume,
// backfill. The CLI (status, history, trigger, pause, resume, backfill)
// and the HTTP API (server/) both call it, so their answers cannot
// disagree; the CLI reaches a memory-backend node through Client, which
// speaks the API and returns the same types.
//
// The JSON of these types is the contract of `--json` and the API: every
// field is always present (null or zero when empty), times are RFC 3339 in
// UTC, a duration is duration_seconds, a fence a number.
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
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Store is what ops needs of a lock backend: the cluster state and the
// pause flags. Every backend of this repository implements both.
type Store interface {
	cluster.Store
	locking.Pauser
	locking.MarkReader
}

// Operator is what the CLI asks of the cluster: Service answers from the
// backend itself, Client through a node's API.
type Operator interface {
	Status(ctx context.Context) (Status, error)
	Runs(ctx context.Context, id string, limit int) ([]Run, error)
	Trigger(ctx context.Context, id string, wait time.Duration) (TriggerAnswer, error)
	Stop(ctx context.Context, id string, wait time.Duration) (StopAnswer, error)
	Cancel(ctx context.Context, id string) (CancelAnswer, error)
	Pause(ctx context.Context, id string, req PauseRequest) (PauseAnswer, error)
	Resume(ctx context.Context, id string) (PauseAnswer, error)
	Backfill(ctx context.Context, id string, from, to time.Time) (BackfillAnswer, error)
	Audit(ctx context.Context, id string, from, to time.Time) ([]AuditTick, error)
	AuditSummary(ctx context.Context, from, to time.Time) ([]AuditSummary, error)
}

// Errors. The CLI and the API map them to exit codes and statuses.
var (
	// ErrUnknownSchedule: no schedule has this id in the config (exit 2, 404).
	ErrUnknownSchedule = errors.New("ops: unknown schedule")
	// ErrInvalid: a bad argument (a limit below 1, an empty range, an end
	// time in the past) (exit 2, 400).
	ErrInvalid = errors.New("ops: invalid argument")
	// ErrRunning: the schedule runs elsewhere and its overlap is skip, so
	// a trigger is refused at once (exit 75, 409).
	ErrRunning = errors.New("ops: the schedule is running elsewhere (overlap = \"skip\")")
	// ErrBusy: a backfill is already queued for the schedule (exit 1, 409).
	ErrBusy = errors.New("ops: a backfill is already queued for this schedule")
	// ErrNoBackend: the config names no lock backend, so there is no
	// cluster state to read or write (exit 2, 409).
	ErrNoBackend = errors.New("ops: no lock backend configured: cluster state lives in the backend ([locking] backend)")
	// ErrUnavailable: the backend (or the node's API) did not answer
	// (exit 69, 503).
	ErrUnavailable = errors.New("ops: backend unavailable")
	// ErrUnauthorized: the API refused the token (exit 1).
	ErrUnauthorized = errors.New("ops: the API refused the token")
)

// MaxBackfillTicks is the most ticks one backfill may hold.
const MaxBackfillTicks = 1000

// MaxRunsLimit bounds one history query.
const MaxRunsLimit = 10000

// Schedule is one schedule as operators see it.
type Schedule struct {
	ID       string `json:"id"`
	Cron     string `json:"cron"`
	Timezone string `json:"timezone"`
	Hint     string `json:"hint"`
	// Nodes is the tags a node needs to run the schedule (omitted: every
	// node); NoNode warns that no live node has them all, so none asks
	// for its ticks (audit shows them skipped, reason no_node).
	Nodes  []string `json:"nodes,omitempty"`
	NoNode bool     `json:"no_node,omitempty"`
	// Group is the schedule's concurrency group and MaxRunning its
	// max_running (omitted: none).
	Group      string     `json:"group,omitempty"`
	MaxRunning int        `json:"group_max_running,omitempty"`
	Paused     bool       `json:"paused"`
	NextTick   *time.Time `json:"next_tick"` // null when the schedule never fires again
	LastRun    *Run       `json:"last_run"`  // null when none is recorded
	// LastSuccess is the tick of the newest successful run in history
	// (null when none); FailuresInARow the failed runs since it
	// (FailureStreak).
	LastSuccess    *time.Time `json:"last_success"`
	FailuresInARow int        `json:"failures_in_a_row"`
	// MarkAhead is the time the schedule's tick mark says, when that lies
	// further ahead of the backend's clock than max_clock_skew: no tick of
	// it runs before then (null otherwise, and for a schedule that takes
	// no lock). The backend's clock is bounded from above by the live
	// nodes' announcements (backendNowAtMost), else read as this
	// Service's.
	MarkAhead *time.Time `json:"mark_ahead"`
	// Running lists the runs of the schedule going on now, on any live
	// node, as the nodes announced them ([] when idle).
	Running []Running `json:"running"`
	// Queued lists the manual runs waiting for a node, oldest first ([]
	// when none): a trigger each, a backfill as one entry.
	Queued []Queued `json:"queued"`
	// LastAction is the newest operator act on the schedule (who paused,
	// resumed, triggered, backfilled, stopped or cancelled it, when);
	// null when none is recorded.
	LastAction *LastAction `json:"last_action"`

	// Pause is the flag behind Paused (note, end time), for tables.
	Pause locking.Pause `json:"-"`
	// ExpectedRuntime (its default filled in) and MinRuntime (0: none)
	// are the bounds of the anomalies, for the page's duration chart.
	ExpectedRuntime time.Duration `json:"-"`
	MinRuntime      time.Duration `json:"-"`
}

// Run is a finished run as history shows it; its JSON (cluster.Run's)
// spells the duration as duration_seconds.
type Run = cluster.Run

// FromCluster returns a stored run with its times in UTC.
func FromCluster(r cluster.Run) Run {
	r.Tick, r.StartedAt = r.Tick.UTC(), r.StartedAt.UTC()
	return r
}

// Node is a live node: cluster.Node's JSON with times in UTC, its
// readiness and clock offset as it announced them.
type Node struct {
	NodeID     string    `json:"node_id"`
	Version    string    `json:"version"`
	StartedAt  time.Time `json:"started_at"`
	LastSeen   time.Time `json:"last_seen"`
	ConfigHash string    `json:"config_hash"`
	Ready      bool      `json:"ready"`
	// Tags are the node's tags (omitted when it has none).
	Tags []string `json:"tags,omitempty"`
	// ClockOffsetSeconds is the node's clock minus the backend's; null
	// when the node has not measured it (a backend without a clock).
	ClockOffsetSeconds *float64 `json:"clock_offset_seconds"`

	running []cluster.Running // for the schedules' Running
}

// Running is a run going on now, as `status` shows it.
type Running struct {
	Node      string    `json:"node"`
	Tick      time.Time `json:"tick"`
	RunID     string    `json:"run_id"`
	StartedAt time.Time `json:"started_at"` // the first attempt's start
	Attempt   int       `json:"attempt"`
}

// Queued is manual work waiting for a node: a trigger (Tick is the time it
// was asked for; From and To null) or a backfill (Tick is the next of its
// ticks to run, From and To its first and last left).
type Queued struct {
	Kind     string     `json:"kind"` // "trigger" or "backfill"
	Tick     time.Time  `json:"tick"`
	From     *time.Time `json:"from"`
	To       *time.Time `json:"to"`
	By       string     `json:"by"`
	QueuedAt time.Time  `json:"queued_at"`
}

// Status is `status --json` and GET /api/v1/status.
type Status struct {
	Schedules   []Schedule          `json:"schedules"`
	Nodes       []Node              `json:"nodes"`
	ConfigDrift cluster.ConfigDrift `json:"config_drift"`
}

// PauseRequest is the body of POST .../pause: both fields optional.
type PauseRequest struct {
	Note  string     `json:"note"`
	Until *time.Time `json:"until"`
}

// PauseAnswer is what pause and resume answer: the flag as stored.
type PauseAnswer struct {
	Schedule string     `json:"schedule"`
	Paused   bool       `json:"paused"`
	Note     string     `json:"note"`
	Until    *time.Time `json:"until"`
}

// TriggerAnswer is what trigger answers. Accepted is false when no node
// took the request within the wait: it stays queued.
type TriggerAnswer struct {
	Schedule string `json:"schedule"`
	Accepted bool   `json:"accepted"`
	Node     string `json:"node"`
}

// BackfillAnswer is what backfill answers: the ticks queued, in order.
type BackfillAnswer struct {
	Schedule string      `json:"schedule"`
	Ticks    []time.Time `json:"ticks"`
}

// Options configures a Service. Zero values mean the defaults named.
type Options struct {
	// Clock is the time next ticks and requests are stamped with; default
	// time.Now.
	Clock func() time.Time
	// By names who asks, recorded with each request (CLI: user@host;
	// API: "api"); default "ops".
	By string
	// Poll is how often Trigger asks whether a node accepted; default
	// 100ms.
	Poll time.Duration
	// MaxClockSkew is [locking] max_clock_skew: a backfill of a schedule
	// without a tick mark stops this far before now. Default 1s.
	MaxClockSkew time.Duration
	// Keep is [history] keep: an audit reads up to twice as many runs and
	// skips of a schedule, and takes a history of keep or more as maybe
	// trimmed. Default cluster.DefaultKeep.
	Keep int
}

// Service answers operators from the backend itself. It is safe for
// concurrent use; SetSchedules swaps the schedules on a config reload.
type Service struct {
	store   Store // nil: no backend configured
	now     func() time.Time
	by      string
	poll    time.Duration
	maxSkew time.Duration
	keep    int

	lostMu sync.Mutex // the page's cached lost ticks (LostRecently)
	lost   lostCache

	mu   sync.RWMutex
	defs []def   // config order
	byID []int32 // indexes of defs sorted by id, for lookup
}

// def is what the Service keeps of a schedule: what status shows and
// what trigger and backfill need, nothing else (a whole
// scheduler.Schedule and a map index of them were 200 B per schedule,
// kept beside the scheduler's own definitions). The rest of a fleet's
// schedules is mostly the same few shapes: one of each is kept.
type def struct {
	id   string
	spec cronspec.Spec // the ticks as fired (spread applied); nil when the cron is invalid
	*shape
}

type shape struct {
	cron    string
	zone    *time.Location
	hint    string
	overlap scheduler.Overlap // as the config set it ("" when unset)
	// expected (its default filled in) and minRuntime: the anomalies'
	// bounds.
	expected, minRuntime time.Duration
	// nodes is the schedule's nodes joined by commas ("" for every
	// node): a tag holds no comma (config.CheckTag), and a string keeps
	// shape comparable.
	nodes string
	// group and groupMax: its concurrency group ("" for none).
	group    string
	groupMax int
}

// targets returns the nodes d is targeted at (nil: every node).
func (d def) targets() []string {
	if d.nodes == "" {
		return nil
	}
	return strings.Split(d.nodes, ",")
}

// noNode reports whether d is targeted and no node of nodes matches it:
// none asks for its ticks.
func (d def) noNode(nodes []Node) bool {
	if d.nodes == "" {
		return false
	}
	want := d.targets()
	for _, n := range nodes {
		if scheduler.Matches(want, n.Tags) {
			return false
		}
	}
	return true
}

// New returns a Service over store (nil when the config names no backend)
// for the config's schedules (see SetSchedules).
func New(store Store, schedules []scheduler.Schedule, o Options) *Service {
	s := &Service{store: store, now: o.Clock, by: o.By, poll: o.Poll, maxSkew: o.MaxClockSkew, keep: o.Keep}
	if s.keep <= 0 {
		s.keep = cluster.DefaultKeep
	}
	if s.maxSkew <= 0 {
		s.maxSkew = time.Second
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.by == "" {
		s.by = "ops"
	}
	if s.poll <= 0 {
		s.poll = 100 * time.Millisecond
	}
	s.SetSchedules(schedules)
	return s
}

// SetSchedules replaces the schedules (after a config reload). It keeps
// what it shows of them, not the slice.
func (s *Service) SetSchedules(schedules []scheduler.Schedule) {
	defs := make([]def, len(schedules))
	shared := map[shape]*shape{}
	byID := make([]int32, len(schedules))
	for i, d := range schedules {
		expected := d.ExpectedRuntime
		if expected <= 0 {
			expected = scheduler.DefaultExpectedRuntime
		}
		sh := shape{cron: d.CronExpr, zone: zoneOf(d), hint: hintName(d.Hint), overlap: d.Overlap,
			expected: expected, minRuntime: d.MinRuntime, nodes: strings.Join(d.Nodes, ","), group: d.Group, groupMax: d.GroupMax}
		p, ok := shared[sh]
		if !ok {
			p = &sh
			shared[sh] = p
		}
		defs[i] = def{id: d.ID, spec: effectiveSpec(d), shape: p}
		byID[i] = int32(i)
	}
	slices.SortStableFunc(byID, func(a, b int32) int { return strings.Compare(defs[a].id, defs[b].id) })
	s.mu.Lock()
	s.defs, s.byID = defs, byID
	s.mu.Unlock()
}

func (s *Service) schedules() []def {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.defs
}

// lookup returns the schedule id names, or ErrUnknownSchedule. Of two
// with the same id (the scheduler refuses such a set), the last.
func (s *Service) lookup(id string) (def, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i, ok := slices.BinarySearchFunc(s.byID, id, func(j int32, id string) int { return strings.Compare(s.defs[j].id, id) })
	if !ok {
		return def{}, fmt.Errorf("%w %q", ErrUnknownSchedule, id)
	}
	for i+1 < len(s.byID) && s.defs[s.byID[i+1]].id == id {
		i++
	}
	return s.defs[s.byID[i]], nil
}

// Known reports whether id names a schedule of the config.
func (s *Service) Known(id string) bool {
	_, err := s.lookup(id)
	return err == nil
}

// Status assembles every schedule, the live nodes and the config drift.
func (s *Service) Status(ctx context.Context) (Status, error) {
	nodes, drift, err := s.nodes(ctx)
	if err != nil {
		return Status{}, err
	}
	scheds, err := s.listSchedules(ctx, nodes)
	if err != nil {
		return Status{}, err
	}
	return Status{Schedules: scheds, Nodes: nodes, ConfigDrift: drift}, nil
}

// Nodes returns the live nodes, sorted by id.
func (s *Service) Nodes(ctx context.Context) ([]Node, error) {
	nodes, _, err := s.nodes(ctx)
	return nodes, err
}

func (s *Service) nodes(ctx context.Context) ([]Node, cluster.ConfigDrift, error) {
	out := []Node{}
	if s.store == nil {
		return out, cluster.Drift(nil), nil
	}
	ns, err := s.store.Nodes(ctx)
	if err != nil {
		return nil, cluster.ConfigDrift{}, backendErr("listing nodes", err)
	}
	for _, n := range ns {
		out = append(out, nodeOf(n))
	}
	return out, cluster.Drift(ns), nil
}

// pauseFanOut bounds the schedules whose pause flag and tick mark are
// read at once for a status.
const pauseFanOut = 8

// Schedules assembles every schedule of the config, in config order.
func (s *Service) Schedules(ctx context.Context) ([]Schedule, error) {
	var nodes []Node
	if s.store != nil {
		ns, err := s.store.Nodes(ctx)
		if err != nil {
			return nil, backendErr("listing nodes", err)
		}
		for _, n := range ns {
			nodes = append(nodes, nodeOf(n))
		}
	}
	return s.listSchedules(ctx, nodes)
}

// nodeOf is a live node as operators see it.
func nodeOf(n cluster.Node) Node {
	o := Node{NodeID: n.NodeID, Version: n.Version, StartedAt: n.StartedAt.UTC(),
		LastSeen: n.LastSeen.UTC(), ConfigHash: n.ConfigHash, Ready: n.Ready, Tags: n.Tags, running: n.Running}
	if n.ClockOffset != nil {
		sec := n.ClockOffset.Seconds()
		o.ClockOffsetSeconds = &sec
	}
	return o
}

// nodeSeenSlack bounds how old a live node's announcement can be: a node
// is listed for three of the agent's announcement periods (5 s by
// default) after its last one.
const nodeSeenSlack = 15 * time.Second

// backendNowAtMost bounds the backend's clock from above, for the check of
// a mark ahead of it: a live node's announcement is stamped by the
// backend's clock (LastSeen), and the backend lists it no longer than
// nodeSeenSlack after. The Service's own clock counts too, so that without
// a live node the check still runs; with one, a CLI on a host whose clock
// runs behind does not take every freshly raised mark for one ahead.
func backendNowAtMost(now time.Time, nodes []Node) time.Time {
	for _, n := range nodes {
		if t := n.LastSeen.Add(nodeSeenSlack); t.After(now) {
			now = t
		}
	}
	return now
}

// listSchedules is Schedules, given the live nodes.
func (s *Service) listSchedules(ctx context.Context, nodes []Node) ([]Schedule, error) {
	defs := s.schedules()
	now := s.now()
	markRef := backendNowAtMost(now, nodes)
	out := make([]Schedule, len(defs))
	ids := make([]string, len(defs))
	for i, d := range defs {
		out[i] = Schedule{ID: d.id, Cron: d.cron, Timezone: d.zone.String(), Hint: d.hint, Nodes: d.targets(), Group: d.group, MaxRunning: d.groupMax,
			ExpectedRuntime: d.expected, MinRuntime: d.minRuntime, Running: []Running{}, Queued: []Queued{}}
		if d.spec != nil {
			if next := d.spec.Next(now); !next.IsZero() {
				next = next.UTC()
				out[i].NextTick = &next
			}
		}
		ids[i] = d.id
	}
	if s.store == nil || len(defs) == 0 {
		return out, nil
	}
	for i, d := range defs {
		out[i].NoNode = d.noNode(nodes) // the nodes are known only from a backend
	}
	if err := s.addLive(ctx, out, nodes); err != nil {
		return nil, err
	}
	last, err := s.store.LastRuns(ctx, ids)
	if err != nil {
		return nil, backendErr("reading the last runs", err)
	}
	// A schedule's newest record is often the provisional one of a run
	// still going (result running): its last run is the newest that
	// ended, read for those schedules only (one small read each); with
	// none ended yet, the running one is shown.
	known := make(map[string]newest, len(last))
	for id, r := range last {
		if r.Result != cluster.ResultRunning {
			known[id] = newest{runs: []cluster.Run{r}}
			continue
		}
		const n = 8
		rs, err := s.store.Runs(ctx, id, n)
		if err != nil {
			return nil, backendErr("reading the last runs", err)
		}
		known[id] = newest{runs: rs, all: len(rs) < n}
		for _, f := range rs {
			if f.Result != cluster.ResultRunning {
				last[id] = f
				break
			}
		}
	}
	for i := range out {
		if r, ok := last[out[i].ID]; ok {
			run := FromCluster(r)
			out[i].LastRun = &run
		}
	}
	// One read per schedule: fan out, a few at a time.
	errs := make([]error, len(out))
	sem := make(chan struct{}, pauseFanOut)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			as, err := s.store.Actions(ctx, out[i].ID, StreakActions)
			if err != nil {
				errs[i] = err
				return
			}
			if len(as) > 0 {
				a := as[0]
				a.At = a.At.UTC()
				out[i].LastAction = &a
			}
			if k, ok := known[out[i].ID]; ok {
				if errs[i] = s.successAndStreak(ctx, &out[i], k, StreakSince(as)); errs[i] != nil {
					return
				}
			}
			p, err := s.store.GetPause(ctx, out[i].ID)
			if err != nil {
				errs[i] = err
				return
			}
			out[i].Pause, out[i].Paused = p, p.Active(now)
			if defs[i].hint == string(hints.NodeLocal) {
				return // no lock, no mark
			}
			mark, ok, err := s.store.Mark(ctx, out[i].ID)
			if err != nil {
				errs[i] = err
				return
			}
			if ok && mark.Sub(markRef) > s.maxSkew {
				mark = mark.UTC()
				out[i].MarkAhead = &mark
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, backendErr("reading pause flags, tick marks and recent runs", err)
	}
	return out, nil
}

// addLive fills each schedule's Running, from the live nodes'
// announcements, and Queued, from the queues of the schedules that have
// requests (one read for the cluster, then one per such schedule).
func (s *Service) addLive(ctx context.Context, out []Schedule, nodes []Node) error {
	at := make(map[string]int, len(out))
	for i := range out {
		at[out[i].ID] = i
	}
	for _, n := range nodes {
		for _, r := range n.running {
			if i, ok := at[r.Schedule]; ok {
				out[i].Running = append(out[i].Running, Running{Node: n.NodeID, Tick: r.Tick.UTC(),
					RunID: r.RunID, StartedAt: r.StartedAt.UTC(), Attempt: r.Attempt})
			}
		}
	}
	queued, err := s.store.Queued(ctx)
	if err != nil {
		return backendErr("listing the queues", err)
	}
	for _, id := range queued {
		i, ok := at[id]
		if !ok {
			continue // a schedule of another config
		}
		reqs, err := s.store.Requests(ctx, id)
		if err != nil {
			return backendErr("reading the queue of "+id, err)
		}
		out[i].Queued = queuedOf(reqs)
	}
	return nil
}

// queuedOf shows a queue: each trigger, and each backfill (its requests
// asked together: the same By and At) as one entry.
func queuedOf(reqs []cluster.Request) []Queued {
	out := []Queued{}
	for _, r := range reqs {
		if !r.Backfill {
			out = append(out, Queued{Kind: "trigger", Tick: r.Tick.UTC(), By: r.By, QueuedAt: r.At.UTC()})
			continue
		}
		tick := r.Tick.UTC()
		if n := len(out); n > 0 && out[n-1].Kind == "backfill" && out[n-1].By == r.By && out[n-1].QueuedAt.Equal(r.At.UTC()) {
			if tick.Before(*out[n-1].From) {
				out[n-1].From = &tick
			}
			if tick.After(*out[n-1].To) {
				out[n-1].To = &tick
			}
			continue
		}
		from, to := tick, tick
		out = append(out, Queued{Kind: "backfill", Tick: tick, From: &from, To: &to, By: r.By, QueuedAt: r.At.UTC()})
	}
	return out
}

// newest is a schedule's newest runs read so far, newest first; all: they
// are its whole history.
type newest struct {
	runs []cluster.Run
	all  bool
}

// successAndStreak sets sc's LastSuccess and FailuresInARow from its
// newest runs k, the streak counting runs started after since (the last
// resume: a resume starts a new streak). Most schedules' newest run succeeded, and k answers both
// (a streak ends at a success); only a schedule whose newest runs hold no
// success has its whole history read (up to 2×keep runs).
func (s *Service) successAndStreak(ctx context.Context, sc *Schedule, k newest, since time.Time) error {
	if lastSuccess(k.runs) == nil && !k.all {
		rs, err := s.store.Runs(ctx, sc.ID, min(2*s.keep, MaxRunsLimit))
		if err != nil {
			return err
		}
		k.runs = rs
	}
	sc.LastSuccess, sc.FailuresInARow = lastSuccess(k.runs), FailureStreak(k.runs, since)
	return nil
}

// Runs returns up to limit runs of schedule id, newest first.
func (s *Service) Runs(ctx context.Context, id string, limit int) ([]Run, error) {
	if _, err := s.lookup(id); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxRunsLimit {
		return nil, fmt.Errorf("%w: limit %d: want 1 to %d", ErrInvalid, limit, MaxRunsLimit)
	}
	if s.store == nil {
		return nil, ErrNoBackend
	}
	rs, err := s.store.Runs(ctx, id, limit)
	if err != nil {
		return nil, backendErr("reading history", err)
	}
	out := make([]Run, 0, len(rs))
	for _, r := range rs {
		out = append(out, FromCluster(r))
	}
	return out, nil
}

// zoneName is the zone a schedule fires in, as an IANA name.
func zoneName(d scheduler.Schedule) string { return zoneOf(d).String() }

// zoneOf is the zone a schedule fires in.
func zoneOf(d scheduler.Schedule) *time.Location {
	if loc := cronspec.Location(d.Spec); loc != nil {
		return loc
	}
	if d.Location != nil {
		return d.Location
	}
	return time.UTC
}

func hintName(h hints.Hint) string {
	if h == "" {
		return string(hints.Default)
	}
	return string(h)
}

// effectiveSpec is the schedule's ticks as the scheduler fires them: its
// Spec (parsed from CronExpr when nil) with the spread offset, applied
// once.
func effectiveSpec(d scheduler.Schedule) cronspec.Spec {
	spec := d.Spec
	if spec == nil {
		var err error
		if spec, err = cronspec.Parse(d.CronExpr, d.Location); err != nil {
			return nil
		}
	}
	return cronspec.ApplySpread(spec, d.ID, d.Spread)
}

// backendErr wraps a store's failure; one that says the backend could not
// be reached also matches ErrUnavailable.
func backendErr(what string, err error) error {
	if Unreachable(err) {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
	}
	return fmt.Errorf("ops: %s: %w", what, err)
}

// Unreachable reports whether err says the backend did not answer, as
// opposed to answering with a refusal.
func Unreachable(err error) bool {
	return errors.Is(err, locking.ErrUnavailable) || errors.Is(err, ErrUnavailable) ||
		errors.Is(err, context.DeadlineExceeded)
}

var (
	_ Operator = (*Service)(nil)
	_ Operator = (*Client)(nil)
)

// Now is the time the Service stamps its answers with (its clock), so a
// page that says "in 4m" or "3h ago" measures from the same instant as
// the next ticks it shows.
func (s *Service) Now() time.Time { return s.now() }
