// Package agent is a node's side of the cluster state (DESIGN.md
// "Operating it"): it announces the node, records its runs in the
// cluster's history (batched, off the tick's path), picks up manual run
// requests (trigger, backfill) and hands them to the scheduler, pauses a
// schedule after too many failures in a row, and watches for config drift
// between the live nodes. The scheduler itself knows nothing of this: it
// sees only run records (scheduler.RunObserver) and manual runs
// (Scheduler.RunManual).
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Backend is what the agent needs of the lock backend: the cluster state,
// the pause flags, and Release for a request it took but cannot run.
type Backend interface {
	cluster.Store
	locking.Pauser
	Release(ctx context.Context, h *locking.Handle) error
}

// Runner is what the agent needs of the scheduler.
type Runner interface {
	RunManual(m scheduler.Manual) error
}

// Schedule is what the agent knows of one schedule.
type Schedule struct {
	ID                 string
	TTL                time.Duration // its lock's TTL, for a manual run
	PauseAfterFailures int
	// Elsewhere: the schedule targets nodes whose tags this node lacks;
	// it takes none of its manual run requests.
	Elsewhere bool
	// Rerun: on_node_loss = "rerun"; a run of it whose node died is run
	// again here (rerun.go) while its tick is within RerunWindow.
	Rerun       bool
	RerunWindow time.Duration
}

// Options configure an Agent.
type Options struct {
	NodeID    string
	Tags      []string // announced: status warns of a schedule no live node matches
	Version   string
	StartedAt time.Time
	Keep      int // runs kept per schedule; default cluster.DefaultKeep
	// Mask removes secrets (values expanded from ${VAR}, URL credentials)
	// from error lines and output before they are stored. nil: identity.
	Mask func(string) string
	// Drift, when set, is told after every look at the live nodes whether
	// they disagree (the bext_cluster_config_drift gauge).
	Drift func(drift bool)
	// Paused, when set, is told when the agent paused a schedule after
	// pause_after_failures (a notification).
	Paused func(schedule, note string)
	// Clock for the request tick times and the announce; default time.Now.
	Now    func() time.Time
	Logger *slog.Logger

	AnnounceEvery time.Duration // default 5s; a node expires after 3 of them
	RerunEvery    time.Duration // default 1s: how often lost runs are looked for (on_node_loss = "rerun")
	PollEvery     time.Duration // default 1s: how soon a trigger is picked up
	FlushEvery    time.Duration // default 250ms: how long a run record may wait

	// Audit, when set, is asked every AuditEvery for the lost ticks of
	// the schedules this node audits (ops.Service.LostTickTimes), and Lost
	// is told how many each has (bext_scheduler_ticks_lost). Each schedule
	// is audited by one live node, the first in its rendezvous order, so
	// the cluster reads each schedule's history once per AuditEvery.
	Audit func(ctx context.Context, ids []string) (map[string][]time.Time, error)
	Lost  func(lost map[string]int)
	// LostTick, when set, is told each lost tick once (the lost
	// notification): when a second audit in a row of this node finds it,
	// not on every audit that still finds it (see lostTicks).
	LostTick   func(schedule string, tick time.Time)
	AuditEvery time.Duration // default 1m

	// Ready, when set, is the node's readiness (its /readyz), announced
	// with the node; nil announces the node ready.
	Ready func(ctx context.Context) error
	// StopRun, when set, stops a run of this node (the scheduler's
	// StopRun): the agent calls it for an operator's stop request
	// (cluster.Control) naming a schedule that runs here.
	StopRun func(runID string) bool
	// ReplaceRun, when set, stops a run of this node replaced by a later
	// tick of its schedule (the scheduler's ReplaceRun): the agent calls
	// it for a stop request of Reason cluster.StopReplace.
	ReplaceRun func(runID string) bool
}

// Agent is one node's cluster duties. Create with New, start with Run.
type Agent struct {
	b    Backend
	run  Runner
	opts Options
	log  *slog.Logger

	mu sync.Mutex
	// schedules is sorted by ID (a map of them was 50 B per schedule).
	// When common is set it holds only the schedules that differ from it:
	// the others are the ids of hashes, with common's TTL and no
	// pause_after_failures (see SetSchedules).
	schedules []Schedule
	common    *Schedule
	hashes    map[string]string
	fields    func(id string) (string, bool) // field hashes by id (SetFieldHashes)
	configH   string
	drifted   string // the last drift description logged ("" = none)
	// driftIDs are the schedules the last look at the live nodes found in
	// drift: the next announcement carries their field hashes.
	driftIDs []string

	lost lostTicks // the lost ticks already told (audit is its only caller)

	records chan scheduler.RunRecord
	skips   chan scheduler.SkipRecord
	dropped int // records dropped because the queue was full (under mu)

	// live is the node registry as last read (prefer.go): the scheduler's
	// Preferrer reads it on every locked tick, without asking the backend.
	live atomic.Pointer[liveNodes]

	// running is the runs going on on this node (under mu), announced
	// with it; kick asks the announce loop for an early announcement when
	// it changes. offset is the clock offset last measured (ns), with
	// offsetSet once one was.
	running   map[string]cluster.Running // by run id
	stopsSeen map[string]bool            // stop requests acted on (pollStops' only)
	// replaces is the later ticks asking to replace runs of their
	// schedules (ReplaceRuns), replacing's work; replaced the runs
	// named in a request so far (replacing's only).
	replaces  chan replaceAsk
	replaced  map[string]time.Time
	kick      chan struct{}
	offset    atomic.Int64
	offsetSet atomic.Bool
}

// New returns an agent for the node's schedules (see SetSchedules).
func New(b Backend, run Runner, opts Options) *Agent {
	if opts.Keep <= 0 {
		opts.Keep = cluster.DefaultKeep
	}
	if opts.Mask == nil {
		opts.Mask = func(s string) string { return s }
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.AnnounceEvery <= 0 {
		opts.AnnounceEvery = 5 * time.Second
	}
	if opts.PollEvery <= 0 {
		opts.PollEvery = time.Second
	}
	if opts.RerunEvery <= 0 {
		opts.RerunEvery = time.Second
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = 250 * time.Millisecond
	}
	if opts.AuditEvery <= 0 {
		opts.AuditEvery = time.Minute
	}
	return &Agent{b: b, run: run, opts: opts, log: opts.Logger, records: make(chan scheduler.RunRecord, 4096),
		skips: make(chan scheduler.SkipRecord, 4096), running: map[string]cluster.Running{}, kick: make(chan struct{}, 1),
		replaces: make(chan replaceAsk, 64)}
}

// NodeID is the node the agent speaks for.
func (a *Agent) NodeID() string { return a.opts.NodeID }

// SetSchedules tells the agent the node's schedules and their definition
// hashes (what drift compares); called at start and on every reload. The
// agent keeps s (sorted by ID, in place) and hashes: the caller must not
// change them afterwards.
func (a *Agent) SetSchedules(s []Schedule, hashes map[string]string, configHash string) {
	slices.SortStableFunc(s, func(x, y Schedule) int { return strings.Compare(x.ID, y.ID) })
	s, common := compact(s, hashes)
	a.mu.Lock()
	a.schedules, a.common, a.hashes, a.configH = s, common, hashes, configHash
	a.mu.Unlock()
}

// maxDriftFields bounds the schedules whose field hashes one announcement
// carries: a change that touches every schedule (a job fingerprint after
// an upgrade, a zone's rules) would otherwise put all of them in every
// announcement; past it, drift says "definition differs" for the rest.
const maxDriftFields = 1000

// SetFieldHashes tells the agent where its schedules' field hashes are
// (ops.FieldHashes.Of), which it announces for the schedules in drift, so
// drift names the fields that differ; called with SetSchedules.
func (a *Agent) SetFieldHashes(fields func(id string) (string, bool)) {
	a.mu.Lock()
	a.fields = fields
	a.mu.Unlock()
}

// compact keeps, of s (sorted by ID), only the schedules whose TTL,
// pause_after_failures or placement (Elsewhere) differ from most
// schedules' (common), when the
// ids of hashes are exactly those of s, each once: hashes then tells
// which ids are the node's. A fleet's schedules mostly share one TTL, and
// the list of them all was 32 B per schedule beside the hashes. Otherwise
// s is kept whole and common is nil.
func compact(s []Schedule, hashes map[string]string) ([]Schedule, *Schedule) {
	if len(s) < 2 || len(hashes) != len(s) {
		return s, nil
	}
	ttls := map[time.Duration]int{}
	for i, sc := range s {
		if i > 0 && s[i-1].ID == sc.ID {
			return s, nil // a duplicate: schedule says which one wins
		}
		if _, ok := hashes[sc.ID]; !ok {
			return s, nil
		}
		if sc.PauseAfterFailures == 0 && !sc.Elsewhere && !sc.Rerun {
			ttls[sc.TTL]++
		}
	}
	if len(ttls) == 0 {
		return s, nil
	}
	common := &Schedule{}
	n := 0
	for ttl, c := range ttls {
		if c > n || c == n && ttl < common.TTL {
			common.TTL, n = ttl, c
		}
	}
	var rest []Schedule
	for _, sc := range s {
		if sc.TTL != common.TTL || sc.PauseAfterFailures != 0 || sc.Elsewhere || sc.Rerun {
			rest = append(rest, sc)
		}
	}
	return rest, common
}

// schedule returns what the agent knows of schedule id, if it is one of
// this node's (of two with the same id, the last).
func (a *Agent) schedule(id string) (Schedule, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, ok := slices.BinarySearchFunc(a.schedules, id, func(s Schedule, id string) int { return strings.Compare(s.ID, id) })
	if !ok {
		if _, mine := a.hashes[id]; mine && a.common != nil {
			return Schedule{ID: id, TTL: a.common.TTL}, true
		}
		return Schedule{}, false
	}
	for i+1 < len(a.schedules) && a.schedules[i+1].ID == id {
		i++
	}
	return a.schedules[i], true
}

// Observer returns the agent as a scheduler observer (it wants run
// records only), to combine with others through scheduler.Observers.
func (a *Agent) Observer() scheduler.Observer { return observer{a: a} }

type observer struct {
	scheduler.NopObserver
	a *Agent
}

func (o observer) RunRecorded(r scheduler.RunRecord)   { o.a.RunRecorded(r) }
func (o observer) RunStarted(r scheduler.RunStart)     { o.a.RunStarted(r) }
func (o observer) SkipRecorded(r scheduler.SkipRecord) { o.a.SkipRecorded(r) }

// AttemptStarted keeps the attempt a run is at for the node's
// announcement (scheduler.AttemptObserver).
func (o observer) AttemptStarted(runID string, attempt int) {
	o.a.mu.Lock()
	r, ok := o.a.running[runID]
	if ok {
		r.Attempt = attempt
		o.a.running[runID] = r
	}
	o.a.mu.Unlock()
	if ok {
		o.a.announceSoon()
	}
}

// ClockOffset keeps the node's clock offset for its announcement
// (scheduler.ClockObserver).
func (o observer) ClockOffset(d time.Duration) {
	o.a.offset.Store(int64(d))
	o.a.offsetSet.Store(true)
}

// RunStarted queues the run's provisional record (result running, no
// attempts) for the history (scheduler.RunStartObserver): a run whose node
// dies before it ends is still in history, with its node and fence, and
// `audit` does not call its tick lost. The run's final record replaces it
// (cluster.Store.RecordRuns). Queued on the run records' queue, so that it
// is written before its final record.
func (a *Agent) RunStarted(r scheduler.RunStart) {
	a.mu.Lock()
	a.running[r.RunID] = cluster.Running{Schedule: r.Schedule, Tick: r.Tick, RunID: r.RunID, StartedAt: r.Start, Attempt: 1}
	a.mu.Unlock()
	a.announceSoon()
	a.RunRecorded(scheduler.RunRecord{Schedule: r.Schedule, Tick: r.Tick, Node: r.Node,
		Result: cluster.ResultRunning, Start: r.Start, Fence: r.Fence, Manual: r.Manual, RunID: r.RunID, By: r.By})
}

// SkipRecorded queues a tick consumed without a run for the history
// (scheduler.SkipObserver); like RunRecorded, it never blocks.
func (a *Agent) SkipRecorded(r scheduler.SkipRecord) {
	select {
	case a.skips <- r:
	default:
		a.mu.Lock()
		a.dropped++
		a.mu.Unlock()
	}
}

// RunRecorded queues a run for the history (scheduler.RunObserver). It
// never blocks a run: when the queue is full (a backend down for long),
// the record is dropped and counted in the log.
func (a *Agent) RunRecorded(r scheduler.RunRecord) {
	if r.Result != cluster.ResultRunning {
		a.mu.Lock()
		_, was := a.running[r.RunID]
		delete(a.running, r.RunID)
		a.mu.Unlock()
		if was {
			a.announceSoon()
		}
	}
	select {
	case a.records <- r:
	default:
		a.mu.Lock()
		a.dropped++
		a.mu.Unlock()
	}
}

// Run does the agent's duties until ctx ends: it announces the node,
// picks up manual run requests and writes run records to the history.
// The history outlives ctx: runs that end during the shutdown grace are
// recorded after ctx ended, so Run keeps writing them until runsEnded is
// closed (the scheduler's Run returned: no record comes after it; nil
// means at ctx's end). It then flushes what is left and leaves the
// cluster, each bounded by historyTimeout on a fresh context.
func (a *Agent) Run(ctx context.Context, runsEnded <-chan struct{}) {
	if runsEnded == nil {
		runsEnded = ctx.Done()
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); a.announceLoop(ctx) }()
	go func() {
		defer wg.Done()
		a.every(ctx, a.opts.PollEvery, func(pctx context.Context) { a.poll(ctx, pctx) })
	}()
	if a.opts.StopRun != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.every(ctx, a.opts.PollEvery, a.pollStops) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); a.replacing(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); a.every(ctx, a.opts.RerunEvery, a.rerunLost) }()
	go func() { defer wg.Done(); a.recordLoop(context.WithoutCancel(ctx), runsEnded) }()
	if a.opts.Audit != nil && a.opts.Lost != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The first audit waits a period: the announce must have read
			// the live nodes, and a node just started has nothing to add.
			select {
			case <-ctx.Done():
				return
			case <-time.After(a.opts.AuditEvery):
			}
			a.every(ctx, a.opts.AuditEvery, a.audit)
		}()
	}
	wg.Wait()
	end, cancel := context.WithTimeout(context.WithoutCancel(ctx), historyTimeout)
	defer cancel()
	if err := a.b.Leave(end, a.opts.NodeID); err != nil {
		a.log.Debug("leaving the cluster's node list failed", slog.Any("error", err))
	}
}

// pollStops acts on the operators' stop requests: for each one it has not
// acted on that names runs going on here, it stops them and tells the
// cluster what it stopped. Only the runs named: a request is read late by
// a node that had nothing running when it was asked (such a node does not
// poll), and the run it started since is not the one asked to stop. A
// node with nothing running reads nothing.
func (a *Agent) pollStops(ctx context.Context) {
	a.mu.Lock()
	idle := len(a.running) == 0
	a.mu.Unlock()
	if idle {
		return
	}
	reqs, err := a.b.StopRequests(ctx)
	if err != nil {
		a.log.Debug("looking for stop requests failed", slog.Any("error", err))
		return
	}
	if a.stopsSeen == nil {
		a.stopsSeen = map[string]bool{}
	}
	live := make(map[string]bool, len(reqs))
	for _, r := range reqs {
		live[r.ID] = true
		if a.stopsSeen[r.ID] {
			continue
		}
		var runs []cluster.Running
		a.mu.Lock()
		for _, runID := range r.RunIDs {
			if run, ok := a.running[runID]; ok && run.Schedule == r.Schedule {
				runs = append(runs, run)
			}
		}
		a.mu.Unlock()
		if len(runs) == 0 {
			a.stopsSeen[r.ID] = true // not ours: nothing runs here
			continue
		}
		stopped := []cluster.Stopped{}
		stop, why := a.opts.StopRun, "stopping a run, as an operator asked"
		if r.Reason == cluster.StopReplace && a.opts.ReplaceRun != nil {
			stop, why = a.opts.ReplaceRun, "stopping a run: a later tick of its schedule replaces it"
		}
		for _, run := range runs {
			if stop(run.RunID) {
				stopped = append(stopped, cluster.Stopped{Node: a.opts.NodeID, Tick: run.Tick, RunID: run.RunID})
				a.log.Warn(why, slog.String("schedule", r.Schedule),
					slog.String("tick", run.Tick.UTC().Format(time.RFC3339)), slog.String("run_id", run.RunID),
					slog.String("by", r.By))
			}
		}
		if err := a.b.StopActed(ctx, r.ID, a.opts.NodeID, stopped); err != nil {
			// Not seen: the next poll stops again (a no-op for a run
			// stopped already) and tells again.
			a.log.Warn("telling the cluster what was stopped failed", slog.String("schedule", r.Schedule), slog.Any("error", err))
			continue
		}
		a.stopsSeen[r.ID] = true
	}
	for id := range a.stopsSeen {
		if !live[id] {
			delete(a.stopsSeen, id)
		}
	}
}

// audit asks for the lost ticks of the schedules this node audits (the
// first in each one's rendezvous order among the live nodes) and tells
// Lost. With no live registry read yet it audits nothing.
func (a *Agent) audit(ctx context.Context) {
	live := a.live.Load()
	if live == nil {
		return
	}
	var mine []string
	for _, id := range a.scheduleIDs() {
		if rank, _ := live.peers.Rank(id, time.Time{}); rank == 0 {
			mine = append(mine, id)
		}
	}
	ticks, err := a.opts.Audit(ctx, mine)
	if err != nil {
		a.log.Warn("auditing the schedules' recent ticks failed", slog.Int("schedules", len(mine)), slog.Any("error", err))
		if ctx.Err() != nil {
			return // keep the last answer rather than clear it
		}
	}
	lost := make(map[string]int, len(ticks))
	for id, ts := range ticks {
		lost[id] = len(ts)
	}
	a.opts.Lost(lost)
	a.lost.tell(ticks, err == nil, a.opts.LostTick)
}

// scheduleIDs returns the ids of the node's schedules.
func (a *Agent) scheduleIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.common != nil {
		ids := make([]string, 0, len(a.hashes))
		for id := range a.hashes {
			ids = append(ids, id)
		}
		return ids
	}
	ids := make([]string, len(a.schedules))
	for i, sc := range a.schedules {
		ids[i] = sc.ID
	}
	return ids
}

// lastSuccessRuns is how many of a schedule's newest runs LastSuccess
// reads: a success older than that is left to what the node saw.
const lastSuccessRuns = 20

// LastSuccess returns the tick of schedule's newest successful run among
// its newest lastSuccessRuns in the cluster's history
// (scheduler.History): what a run's BEXT_LAST_SUCCESS_TICK_TIME says,
// whichever node ran that success. It is asked at every run's start, so it
// reads the newest run alone first (a record carries up to 4 KiB of
// output): the run before is a success most of the time.
func (a *Agent) LastSuccess(ctx context.Context, schedule string) (time.Time, bool, error) {
	last, err := a.b.LastRuns(ctx, []string{schedule})
	if err != nil {
		return time.Time{}, false, err
	}
	if r, ok := last[schedule]; !ok || r.Result == string(scheduler.ResultSuccess) {
		return r.Tick, ok, nil
	}
	runs, err := a.b.Runs(ctx, schedule, lastSuccessRuns)
	if err != nil {
		return time.Time{}, false, err
	}
	for _, r := range runs {
		if r.Result == string(scheduler.ResultSuccess) {
			return r.Tick, true, nil
		}
	}
	return time.Time{}, false, nil
}

// historyTimeout bounds one write of run records (and the last one at
// shutdown, and leaving the node list): a backend that does not answer
// must not keep a stopping node from exiting.
const historyTimeout = 5 * time.Second

// every calls f at once, then every d, until ctx ends.
func (a *Agent) every(ctx context.Context, d time.Duration, f func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		opCtx, cancel := context.WithTimeout(ctx, max(d, 2*time.Second))
		f(opCtx)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// announceSoon asks for an announcement before the next period: what
// runs on the node changed, and `status` and `stop` read it from there.
func (a *Agent) announceSoon() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// announceGap is the least time between two announcements: a node whose
// runs start and end many times a second announces once a second.
const announceGap = time.Second

// announceLoop announces at once, then every AnnounceEvery, and soon
// after what runs changed (announceSoon), at most once per announceGap.
func (a *Agent) announceLoop(ctx context.Context) {
	t := time.NewTicker(a.opts.AnnounceEvery)
	defer t.Stop()
	for {
		opCtx, cancel := context.WithTimeout(ctx, max(a.opts.AnnounceEvery, 2*time.Second))
		a.announce(opCtx)
		cancel()
		gap := time.NewTimer(min(announceGap, a.opts.AnnounceEvery))
		select {
		case <-ctx.Done():
			gap.Stop()
			return
		case <-gap.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.kick:
		}
	}
}

// announce tells the cluster this node is alive, with its readiness,
// clock offset and running runs, then looks at the live nodes for config
// drift.
func (a *Agent) announce(ctx context.Context) {
	ready := a.opts.Ready == nil || a.opts.Ready(ctx) == nil
	a.mu.Lock()
	n := cluster.Node{NodeID: a.opts.NodeID, Version: a.opts.Version, StartedAt: a.opts.StartedAt,
		ConfigHash: a.configH, Schedules: a.hashes, Ready: ready, Tags: a.opts.Tags}
	for _, r := range a.running {
		n.Running = append(n.Running, r)
	}
	for _, id := range a.driftIDs[:min(len(a.driftIDs), maxDriftFields)] {
		if a.fields == nil {
			break
		}
		if f, ok := a.fields(id); ok {
			if n.Fields == nil {
				n.Fields = map[string]string{}
			}
			n.Fields[id] = f
		}
	}
	a.mu.Unlock()
	slices.SortFunc(n.Running, func(x, y cluster.Running) int {
		return cmp.Or(x.StartedAt.Compare(y.StartedAt), strings.Compare(x.RunID, y.RunID))
	})
	if a.offsetSet.Load() {
		d := time.Duration(a.offset.Load())
		n.ClockOffset = &d
	}
	if err := a.b.Announce(ctx, n, 3*a.opts.AnnounceEvery); err != nil {
		a.log.Debug("announcing the node failed", slog.Any("error", err))
		return
	}
	nodes, err := a.b.Nodes(ctx)
	if err != nil {
		a.log.Debug("listing the nodes failed", slog.Any("error", err))
		return
	}
	a.setLive(nodes)
	d := cluster.Drift(nodes)
	desc := describeDrift(d)
	if a.opts.Drift != nil {
		a.opts.Drift(desc != "")
	}
	ids := make([]string, len(d.Schedules))
	for i, sd := range d.Schedules {
		ids[i] = sd.ID
	}
	a.mu.Lock()
	changed := desc != a.drifted
	a.drifted = desc
	a.driftIDs = ids
	a.mu.Unlock()
	switch {
	case changed && desc != "":
		a.log.Warn("config drift: the live nodes run different schedules", slog.String("drift", desc))
	case changed:
		a.log.Info("config drift resolved: the live nodes agree")
	}
}

// describeDrift names the schedules on which live nodes disagree, the
// nodes on each side and the fields that differ ("" when they agree), from
// cluster.Drift: the same comparison status and the API show.
func describeDrift(d cluster.ConfigDrift) string {
	if !d.Drifted {
		return ""
	}
	var parts []string
	for _, sd := range d.Schedules {
		var sides []string
		for _, side := range sd.Sides {
			what := "absent on"
			if side.Hash != "" {
				what = "definition " + side.Hash[:min(8, len(side.Hash))] + " on"
			}
			sides = append(sides, what+" "+strings.Join(side.Nodes, ","))
		}
		what := ""
		if w := sd.What(); w != "" {
			what = " (" + w + ")"
		}
		parts = append(parts, sd.ID+": "+strings.Join(sides, " vs ")+what)
	}
	if len(parts) == 0 {
		return "the nodes' config hashes differ"
	}
	return strings.Join(parts, "; ")
}

// poll picks up the manual run requests of this node's schedules.
func (a *Agent) poll(run, ctx context.Context) {
	ids, err := a.b.Queued(ctx)
	if err != nil {
		a.log.Debug("looking for manual run requests failed", slog.Any("error", err))
		return
	}
	for _, id := range ids {
		sc, mine := a.schedule(id)
		if !mine || sc.Elsewhere {
			continue
		}
		sent := a.opts.Now()
		taken, answered, err := a.take(ctx, id, sc.TTL)
		if err != nil {
			a.log.Warn("taking a manual run request failed", slog.String("schedule", id), slog.Any("error", err))
			continue
		}
		if taken.Request == nil || taken.Handle == nil {
			continue // empty, or the schedule runs elsewhere: next poll
		}
		req := *taken.Request
		tick := req.Tick
		if !req.Backfill {
			// A trigger's BEXT_TICK_TIME is when it was accepted (DESIGN.md).
			tick = sent.UTC().Truncate(time.Millisecond)
		}
		done := func() {
			if !req.Backfill {
				return
			}
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := a.b.Done(dctx, req); err != nil {
				a.log.Warn("marking a backfilled tick done failed: another node may run it again",
					slog.String("schedule", id), slog.String("tick", req.Tick.Format(time.RFC3339)), slog.Any("error", err))
			}
		}
		h, keepUntil := taken.Handle, answered.Add(a.takeKeep(sc.TTL))
		m := scheduler.Manual{ID: id, Tick: tick, RunID: req.ID, By: req.By, Handle: h, Sent: answered, Backfill: req.Backfill,
			GiveBack: func() { a.giveBack(run, h, req, keepUntil) },
			Done:     func(scheduler.RunResult) { done() }}
		kind := "trigger"
		if req.Backfill {
			kind = "backfill"
		}
		if err := a.run.RunManual(m); err != nil {
			// Not started: given back, the trigger waits for another node
			// (or this one's next poll); a backfill tick stays queued.
			a.giveBack(run, h, req, keepUntil)
			if errors.Is(err, scheduler.ErrTickUndecided) {
				// Its regular tick runs it: asked again once decided, it
				// would run twice. Dropped from the queue.
				a.log.Warn("backfilled tick dropped: its schedule has not decided it yet, its regular tick runs it",
					slog.String("schedule", id), slog.String("tick", req.Tick.Format(time.RFC3339)), slog.Any("error", err))
				done()
				continue
			}
			a.log.Warn("manual run refused", slog.String("schedule", id), slog.String("kind", kind), slog.Any("error", err))
			continue
		}
		a.log.Info("manual run accepted", slog.String("schedule", id), slog.String("kind", kind),
			slog.String("run_id", req.ID), slog.String("tick", tick.Format(time.RFC3339)), slog.String("by", req.By))
	}
}

// Resending a take whose answer was not definite. TakeRequest takes a
// trigger off its queue in the step that takes the lock: if the reply is
// lost after the backend applied it, the trigger runs nowhere, though
// `trigger` was told it was accepted. So each take carries a token drawn
// here and, on an answer that is not definite, is sent again with the
// same token: the backend answers it from its record of the first
// (cluster.Store.TakeRequest). Resends wait resendFirst, doubling up to
// resendMax, for as long as a lock the first attempt took may live: its
// TTL from the first send (Postgres: or MaxLease, if longer). Past it the backend no longer answers for the
// lock (a trigger whose lock ended goes back to its queue once another
// takes the lock, or is taken again by a later resend of ours), and the
// take is given up: logged, as before resends.
const (
	resendFirst = 10 * time.Millisecond
	resendMax   = 500 * time.Millisecond
)

// take takes schedule id's lock and queue head for ttl, resending the take
// while its answer is not definite (see above). answered is when the
// attempt that was answered was sent: the lease of a lock it took or
// extended counts from there.
func (a *Agent) take(ctx context.Context, id string, ttl time.Duration) (tk cluster.Taken, answered time.Time, err error) {
	token, err := locking.NewToken()
	if err != nil {
		return cluster.Taken{}, time.Time{}, err
	}
	req := cluster.TakeReq{Schedule: id, Node: a.opts.NodeID, TTL: ttl, Token: token}
	first := time.Now()
	// A lock the first attempt took lives its TTL, or on Postgres until
	// the server drops the session of a lost reply (within MaxLease: the
	// resends are answered ErrResendHeld meanwhile, then take the trigger
	// again).
	window := ttl
	if lb, ok := a.b.(locking.LeaseBounder); ok {
		window = max(window, lb.MaxLease())
	}
	end := first.Add(window)
	// The poll's context bounds the first attempt only: a resend past it
	// still finds a trigger the first took. The agent's stop (a
	// cancellation, not the poll's deadline) ends the resends.
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), context.Canceled) {
			cancel()
		}
	})
	defer stop()
	actx := ctx
	wait := resendFirst
	for sends := 0; ; sends++ {
		answered = a.opts.Now()
		tk, err = a.b.TakeRequest(actx, req)
		if !indefinite(err) {
			return tk, answered, err
		}
		if sends == 0 {
			actx = rctx
		}
		d := min(wait, time.Until(end))
		if d <= 0 || rctx.Err() != nil {
			return tk, answered, fmt.Errorf("agent: take of %q undecided after %d resends: %w", id, sends, err)
		}
		a.log.Debug("take undecided: resending it", slog.String("schedule", id), slog.Int("resends", sends+1), slog.Any("error", err))
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-rctx.Done():
			t.Stop()
		}
		wait = min(2*wait, resendMax)
	}
}

// takeKeep is how long the backend keeps a take's record, for its
// give-back: cluster.TakeKeep of its TTL (Postgres: of max(TTL,
// MaxLease)).
func (a *Agent) takeKeep(ttl time.Duration) time.Duration {
	if lb, ok := a.b.(locking.LeaseBounder); ok {
		ttl = max(ttl, lb.MaxLease())
	}
	return cluster.TakeKeep(ttl)
}

// giveBack gives back the take h of req, whose run will not start
// (cluster.Store.GiveBack), resending it while its answer is not definite
// and the backend keeps the take's record (until keepUntil): a resend is
// harmless, and one that stopped early could leave the trigger run
// nowhere. run is Run's context: each attempt has its own, without run's
// cancellation (the take is given back even when the poll, or the agent,
// ended), and the agent's stop ends the resends.
//
// A first give-back that goes out once the keep has passed may find no
// record left (the backend answers it as a release: nothing put back),
// and the trigger would then run nowhere: it is logged, a warning, as the
// backend's answer cannot tell.
func (a *Agent) giveBack(run context.Context, h *locking.Handle, req cluster.Request, keepUntil time.Time) {
	if late := a.opts.Now().Sub(keepUntil); late >= 0 {
		a.log.Warn("giving back a manual run request after the backend's keep of its take: its trigger may run nowhere",
			slog.String("schedule", req.Schedule), slog.String("request", req.ID), slog.Duration("late", late))
	}
	wait := resendFirst
	for sends := 0; ; sends++ {
		gctx, cancel := context.WithTimeout(context.WithoutCancel(run), 5*time.Second)
		err := a.b.GiveBack(gctx, h)
		cancel()
		if !indefinite(err) {
			if err != nil {
				a.log.Warn("giving back a manual run request failed", slog.String("schedule", req.Schedule),
					slog.String("request", req.ID), slog.Any("error", err))
			}
			return
		}
		d := min(wait, time.Until(keepUntil))
		if d <= 0 || run.Err() != nil {
			a.log.Warn("giving back a manual run request undecided: it may run nowhere", slog.String("schedule", req.Schedule),
				slog.String("request", req.ID), slog.Int("resends", sends), slog.Any("error", err))
			return
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-run.Done():
			t.Stop()
		}
		wait = min(2*wait, resendMax)
	}
}

// indefinite reports whether err leaves a take undecided: the backend may
// or may not have applied it (no reply, a broken connection, Postgres's
// resend held). It is the rule the scheduler resends a try-lock-tick by
// (scheduler/resend.go's indefinite), kept here as the agent's own: an
// invalid request, a closed Locker or a cancelled call are decided.
func indefinite(err error) bool {
	if err == nil || errors.Is(err, locking.ErrInvalid) || errors.Is(err, cluster.ErrInvalid) {
		return false
	}
	var ne net.Error
	return errors.Is(err, locking.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// recordLoop batches run records into the history until runsEnded is
// closed, then flushes what is left. ctx carries no cancellation (the
// node's stop must not drop the records of runs still ending): each write
// is bounded by historyTimeout instead.
func (a *Agent) recordLoop(ctx context.Context, runsEnded <-chan struct{}) {
	t := time.NewTicker(a.opts.FlushEvery)
	defer t.Stop()
	var (
		batch []scheduler.RunRecord
		skips []scheduler.SkipRecord
	)
	flush := func() {
		if len(batch) > 0 {
			fctx, cancel := context.WithTimeout(ctx, historyTimeout)
			a.flush(fctx, batch)
			cancel()
			batch = batch[:0]
		}
		if len(skips) > 0 {
			fctx, cancel := context.WithTimeout(ctx, historyTimeout)
			a.flushSkips(fctx, skips)
			cancel()
			skips = skips[:0]
		}
	}
	for {
		select {
		case r := <-a.records:
			batch = append(batch, r)
			if r.Result == cluster.ResultRunning {
				// A run's start is written at once, with what else is
				// queued (group commit: under load, starts batch while
				// a write is out): until it lands, a node killed under the
				// run leaves its tick with no record, lost to audit.
			queued:
				for len(batch) < 256 {
					select {
					case r := <-a.records:
						batch = append(batch, r)
					default:
						break queued
					}
				}
				flush()
			}
			if len(batch) >= 256 {
				flush()
			}
		case k := <-a.skips:
			skips = append(skips, k)
			if len(skips) >= 1024 {
				flush()
			}
		case <-t.C:
			flush()
		case <-runsEnded:
			for {
				select {
				case r := <-a.records:
					batch = append(batch, r)
				case k := <-a.skips:
					skips = append(skips, k)
				default:
					flush()
					return
				}
			}
		}
	}
}

// flush writes a batch of runs in one call, then pauses schedules whose
// failures in a row reached their pause_after_failures.
func (a *Agent) flush(ctx context.Context, recs []scheduler.RunRecord) {
	runs := make([]cluster.Run, len(recs))
	failed := map[string]bool{}
	for i, r := range recs {
		runs[i] = a.toRun(r)
		if isFailure(runs[i].Result) {
			failed[r.Schedule] = true
		}
	}
	if err := a.b.RecordRuns(ctx, runs, a.opts.Keep); err != nil {
		a.log.Warn("recording runs in the cluster's history failed", slog.Int("runs", len(runs)), slog.Any("error", err))
		return
	}
	a.mu.Lock()
	if a.dropped > 0 {
		a.log.Warn("run records dropped: the history backend was too slow", slog.Int("dropped", a.dropped))
		a.dropped = 0
	}
	a.mu.Unlock()
	for id := range failed {
		a.maybePause(ctx, id)
	}
}

// flushSkips writes a batch of skip records in one call, a paused tick
// with its schedule's pause note (one read per paused schedule: pauses
// are rare).
func (a *Agent) flushSkips(ctx context.Context, recs []scheduler.SkipRecord) {
	skips := make([]cluster.Skip, len(recs))
	notes := map[string]string{}
	for i, r := range recs {
		k := cluster.Skip{Schedule: r.Schedule, Tick: r.Tick, Node: r.Node, Reason: string(r.Reason), At: r.At}
		if r.Reason == scheduler.RecordPaused {
			note, ok := notes[r.Schedule]
			if !ok {
				if p, err := a.b.GetPause(ctx, r.Schedule); err == nil {
					note = p.Note
				}
				notes[r.Schedule] = note
			}
			k.Note = a.opts.Mask(note)
		}
		skips[i] = k
	}
	if err := a.b.RecordSkips(ctx, skips, a.opts.Keep); err != nil {
		a.log.Warn("recording skipped ticks in the cluster's history failed", slog.Int("skips", len(skips)), slog.Any("error", err))
	}
}

func (a *Agent) toRun(r scheduler.RunRecord) cluster.Run {
	run := cluster.Run{
		Schedule: r.Schedule, Tick: r.Tick, Node: r.Node, Result: string(r.Result), StartedAt: r.Start,
		Duration: r.Duration, Fence: r.Fence, Manual: r.Manual, Attempts: r.Attempts, RunID: r.RunID,
		OutputTail: a.opts.Mask(r.Output), Anomaly: r.Anomaly, By: r.By,
	}
	if r.Err != nil {
		run.Error = a.opts.Mask(r.Err.Error())
	}
	return cluster.Bound(run)
}

func isFailure(result string) bool {
	return result == string(scheduler.ResultFailure) || result == string(scheduler.ResultTimeout)
}

// maybePause pauses schedule id cluster-wide when its last
// pause_after_failures runs, on any node, all failed.
func (a *Agent) maybePause(ctx context.Context, id string) {
	sc, _ := a.schedule(id)
	n := sc.PauseAfterFailures
	if n <= 0 {
		return
	}
	// Read twice as many: the provisional records of runs still going
	// (result running) and ticks not run are no runs. The streak is the
	// one status shows (ops.FailureStreak), counted from the last resume:
	// a resume starts a new streak.
	runs, err := a.b.Runs(ctx, id, 2*n)
	if err != nil {
		return
	}
	if ops.FailureStreak(runs, time.Time{}) < n {
		return // the common case: no read of the acts
	}
	acts, err := a.b.Actions(ctx, id, ops.StreakActions)
	if err != nil {
		return
	}
	if ops.FailureStreak(runs, ops.StreakSince(acts)) < n {
		return
	}
	p, err := a.b.GetPause(ctx, id)
	if err == nil && p.Active(a.opts.Now()) {
		return
	}
	note := fmt.Sprintf("paused after %d failed runs in a row (pause_after_failures)", n)
	if err := a.b.SetPause(ctx, id, locking.Pause{Paused: true, Note: note}); err != nil {
		a.log.Error("pausing after failures failed", slog.String("schedule", id), slog.Any("error", err))
		return
	}
	a.log.Warn("schedule paused cluster-wide: "+note, slog.String("schedule", id))
	act := cluster.Action{Schedule: id, Kind: cluster.ActionPause, By: "node " + a.opts.NodeID, At: a.opts.Now().UTC(), Note: note}
	if err := a.b.RecordAction(ctx, act, cluster.DefaultActionsKept); err != nil {
		a.log.Warn("recording the pause after failures failed", slog.String("schedule", id), slog.Any("error", err))
	}
	if a.opts.Paused != nil {
		a.opts.Paused(id, note)
	}
}

// errNoStore is returned by Open when a backend has no cluster state.
var errNoStore = errors.New("agent: the lock backend keeps no cluster state")

// For returns the agent backend of a lock backend, or an error when it is
// not one (no backend configured).
func For(l any) (Backend, error) {
	if b, ok := l.(Backend); ok {
		return b, nil
	}
	return nil, errNoStore
}
