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
}

// Options configure an Agent.
type Options struct {
	NodeID    string
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
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = 250 * time.Millisecond
	}
	if opts.AuditEvery <= 0 {
		opts.AuditEvery = time.Minute
	}
	return &Agent{b: b, run: run, opts: opts, log: opts.Logger, records: make(chan scheduler.RunRecord, 4096),
		skips: make(chan scheduler.SkipRecord, 4096)}
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

// compact keeps, of s (sorted by ID), only the schedules whose TTL or
// pause_after_failures differ from most schedules' (common), when the
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
		if sc.PauseAfterFailures == 0 {
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
		if sc.TTL != common.TTL || sc.PauseAfterFailures != 0 {
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

// RunStarted queues the run's provisional record (result running, no
// attempts) for the history (scheduler.RunStartObserver): a run whose node
// dies before it ends is still in history, with its node and fence, and
// `audit` does not call its tick lost. The run's final record replaces it
// (cluster.Store.RecordRuns). Queued on the run records' queue, so that it
// is written before its final record.
func (a *Agent) RunStarted(r scheduler.RunStart) {
	a.RunRecorded(scheduler.RunRecord{Schedule: r.Schedule, Tick: r.Tick, Node: r.Node,
		Result: cluster.ResultRunning, Start: r.Start, Fence: r.Fence, Manual: r.Manual, RunID: r.RunID})
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
	go func() { defer wg.Done(); a.every(ctx, a.opts.AnnounceEvery, a.announce) }()
	go func() {
		defer wg.Done()
		a.every(ctx, a.opts.PollEvery, func(pctx context.Context) { a.poll(ctx, pctx) })
	}()
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

// announce tells the cluster this node is alive, then looks at the live
// nodes for config drift.
func (a *Agent) announce(ctx context.Context) {
	a.mu.Lock()
	n := cluster.Node{NodeID: a.opts.NodeID, Version: a.opts.Version, StartedAt: a.opts.StartedAt,
		ConfigHash: a.configH, Schedules: a.hashes}
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
		if !mine {
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
		m := scheduler.Manual{ID: id, Tick: tick, RunID: req.ID, Handle: h, Sent: answered, Backfill: req.Backfill,
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
		OutputTail: a.opts.Mask(r.Output),
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
	// (result running) are no runs yet.
	all, err := a.b.Runs(ctx, id, 2*n)
	if err != nil {
		return
	}
	runs := all[:0]
	for _, r := range all {
		if r.Result != cluster.ResultRunning && len(runs) < n {
			runs = append(runs, r)
		}
	}
	if len(runs) < n {
		return
	}
	for _, r := range runs {
		if !isFailure(r.Result) {
			return
		}
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
