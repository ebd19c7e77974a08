package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// A link is one node life's way to the backend, and the fault layer: it
// wraps the node's client of the backend (a memory Peer; in real time a
// Redis or Postgres Locker of its own) and, in the plan's fault windows,
// loses calls before the backend sees them, loses replies after the
// backend applied them, fails calls, or holds every call until the window
// ends.
// A crashed life's link is cut: every later call fails, so a dead process
// releases nothing and a stalled call of it never lands.
//
// It reports itself as a remote backend (no InProcess), and batches
// (TickBatcher, ReleaseBatcher) as the Redis and Postgres backends do: the
// scheduler then takes the path it takes in production, the batcher and
// its error handling included, rather than the shortcut it takes for a
// backend in its own process. The memory backend's answers are the same
// either way.
type link struct {
	c      *cluster
	node   string
	life   int
	mem    nodeLocker
	faults []faultWindow
	cut    atomic.Bool
	dead   chan struct{} // closed when cut: stalled calls give up

	mu    sync.Mutex
	calls map[string]int // per call identity, how many were made: part of its draw
	// sent are the tokens of the try-lock-ticks this link sent: a request
	// whose token it sent before is a resend, whose earlier attempt may
	// land after it (link_dup.go). true: an attempt was lost before the
	// backend saw it, which a delay looks like to the caller.
	sent map[string]bool
	// renewing counts, per token, the renewals under way (sent, not yet
	// returned): those still under way when the life crashes were never
	// heard (leaseLog.diedRenewing).
	renewing map[string]int

	// frz is the life's freezer (freeze.go), nil when it never freezes.
	frz *freezer
}

var (
	_ scheduler.Locker       = (*link)(nil)
	_ locking.TickBatcher    = (*link)(nil)
	_ locking.ReleaseBatcher = (*link)(nil)
	_ locking.Pauser         = (*link)(nil)
)

// Errors the link answers with. A lost reply reads as the deadline the
// caller would have hit, a failed call as an unavailable backend; both
// wrap locking.ErrUnavailable, as a real backend's do.
var (
	errLost    = fmt.Errorf("sim: reply lost: %w (%w)", locking.ErrUnavailable, context.DeadlineExceeded)
	errRefused = fmt.Errorf("sim: call failed: %w", locking.ErrUnavailable)
	errCut     = fmt.Errorf("sim: node crashed: %w", locking.ErrUnavailable)
)

func newLink(c *cluster, node string, life int, faults []faultWindow) *link {
	return &link{c: c, node: node, life: life, mem: c.mem.peer(node, life), faults: faults,
		dead: make(chan struct{}), calls: map[string]int{}, sent: map[string]bool{}}
}

// kill cuts the link (a crash).
func (l *link) kill() {
	if l.cut.CompareAndSwap(false, true) {
		l.mu.Lock()
		for tok, n := range l.renewing {
			if n > 0 {
				l.c.leases.diedRenewing(tok)
			}
		}
		l.mu.Unlock()
		close(l.dead)
		if c, ok := l.mem.(crasher); ok {
			c.crash()
		}
	}
}

// fate is what happens to one call.
type fate uint8

const (
	pass      fate = iota
	loseFirst      // lost before the backend saw it
	loseReply      // applied, reply lost
	failCall       // the backend answered an error (nothing applied)
)

func (f fate) String() string {
	return [...]string{"pass", "lost before applied", "reply lost after applied", "failed"}[f]
}

// decide waits out a stall covering now and draws the call's fate. id
// names the call (operation and its arguments).
func (l *link) decide(ctx context.Context, id string) (fate, error) {
	if l.cut.Load() {
		return 0, errCut
	}
	now := l.c.clock.Now()
	for _, w := range l.faults {
		if !w.covers(now) {
			continue
		}
		switch w.kind {
		case stall:
			if pn, ok := l.mem.(proxiedNode); ok && pn.stall(w.to) {
				// The network stalls it (realtime.go): sent into the
				// blackhole, it waits there until its deadline, and
				// lands when the window ends.
				l.c.event(now, "%s/%d %s sent into a stalled network until %s", l.node, l.life, id, l.c.at(w.to))
				l.c.netStalls.Add(1)
				return pass, nil
			}
			l.c.event(now, "%s/%d %s stalls until %s", l.node, l.life, id, l.c.at(w.to))
			if err := l.wait(ctx, w.to); err != nil {
				return 0, err
			}
			return l.decide(ctx, id) // a window may follow at once
		case flaky:
			l.mu.Lock()
			n := l.calls[id]
			l.calls[id]++
			l.mu.Unlock()
			x := l.c.plan.draw(l.node, l.life, id, n)
			f := pass
			switch {
			case x < 0.15:
				f = loseFirst
			case x < 0.3:
				f = loseReply
			case x < 0.4:
				f = failCall
			}
			if f != pass {
				l.c.event(now, "%s/%d %s: %v", l.node, l.life, id, f)
			}
			return f, nil
		}
	}
	return pass, nil
}

// wait blocks until the fake clock reaches until, the call's deadline
// passes first (ctx's error), or the node crashes.
//
// The scheduler bounds its calls with contexts on the real clock (a
// renewal gets what is left of its lease, a try-lock-tick its TTL), which
// in production runs with the lease clock; here the fake clock runs far
// ahead of it. So the link reads the time left on a caller's deadline, as
// the call begins, as time on the fake clock: a call stalled past it ends
// with DeadlineExceeded when the caller meant it to, on the clock its
// lease is counted on.
// In real time (realtime.go) the two clocks are one, and a stall
// really waits.
func (l *link) wait(ctx context.Context, until time.Time) error {
	now := l.c.clock.Now()
	d := until.Sub(now)
	deadline := false
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		d, deadline = time.Until(dl), true
	}
	t := l.c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		if deadline {
			return fmt.Errorf("sim: no answer by the caller's deadline: %w", context.DeadlineExceeded)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sim: stalled: %w", ctx.Err())
	case <-l.dead:
		return errCut
	}
}

// refusal is the error of a call whose fate keeps it from the backend or
// its reply from the caller: a failed call answers at once, a lost one
// leaves the caller waiting until its deadline (on the fake clock: wait).
func (l *link) refusal(ctx context.Context, f fate) error {
	if f == failCall {
		return errRefused
	}
	if _, ok := ctx.Deadline(); ok {
		if err := l.wait(ctx, l.c.clock.Now().Add(time.Hour)); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
	return errLost
}

func tickID(r locking.TickRequest) string {
	return fmt.Sprintf("try-lock-tick %s@%s", r.Key, r.Tick.UTC().Format("15:04:05.000"))
}

// TryLockTick goes to the backend unless its fate says otherwise; every
// grant the backend applied goes to the cluster's grant log, delivered or
// not.
func (l *link) TryLockTick(ctx context.Context, r locking.TickRequest) (locking.TickAnswer, error) {
	defer l.hold()() // a frozen node's calls neither go out nor come back
	sent := l.c.clock.Now()
	resent, lost := l.resent([]locking.TickRequest{r})
	f, err := l.decide(ctx, tickID(r))
	if err != nil {
		return locking.TickAnswer{}, err
	}
	if f == loseFirst || f == failCall {
		if f == loseFirst {
			l.lostFirst([]locking.TickRequest{r})
		}
		return locking.TickAnswer{}, l.refusal(ctx, f)
	}
	issued := l.c.seq.Add(1)
	ans, err := l.mem.TryLockTick(ctx, r)
	if l.cut.Load() {
		// The process died while the call was on its way: it landed (the
		// backend applied it) but no one is left to hear the answer.
		f = loseReply
	}
	if len(resent) > 0 {
		l.dupLater(tickID(r), lost, l.dupTick(resent, f == pass))
	}
	l.logGrant(r, ans, err, issued, sent, f == pass)
	l.logVerdict(r, ans, err, f == pass, false)
	if f == loseReply {
		return locking.TickAnswer{}, l.refusal(ctx, f)
	}
	return ans, err
}

func (l *link) logGrant(r locking.TickRequest, ans locking.TickAnswer, err error, issued uint64, sent time.Time, delivered bool) {
	if err != nil || ans.Verdict != locking.TickGranted || ans.Handle == nil {
		return
	}
	if delivered {
		l.c.leases.heard(ans.Handle.Token(), sent)
	}
	l.c.grants.add(grant{node: l.node, life: l.life, key: r.Key, tick: r.Tick, perTick: r.PerTick,
		fence: ans.Handle.Fence(), token: ans.Handle.Token(), ttl: r.TTL, at: l.c.clock.Now(),
		issued: issued, returned: l.c.seq.Add(1), delivered: delivered})
	l.c.event(l.c.clock.Now(), "%s/%d granted %s@%s fence %d (delivered %v)", l.node, l.life,
		r.Key, l.c.at(r.Tick), ans.Handle.Fence(), delivered)
}

// TryLockTicks is one round trip for the batch: its fate is the fate of
// every request in it, as when a connection drops.
func (l *link) TryLockTicks(ctx context.Context, reqs []locking.TickRequest) ([]locking.TickAnswer, []error) {
	defer l.hold()() // a frozen node's calls neither go out nor come back
	sent := l.c.clock.Now()
	answers, errs := make([]locking.TickAnswer, len(reqs)), make([]error, len(reqs))
	resent, lost := l.resent(reqs)
	fail := func(err error) ([]locking.TickAnswer, []error) {
		for i := range errs {
			errs[i] = err
		}
		return answers, errs
	}
	f, err := l.decide(ctx, "batch of "+tickID(reqs[0]))
	if err != nil {
		return fail(err)
	}
	if f == loseFirst || f == failCall {
		if f == loseFirst {
			l.lostFirst(reqs)
		}
		return fail(l.refusal(ctx, f))
	}
	issued := l.c.seq.Add(1)
	got, gotErrs := l.mem.TryLockTicks(ctx, reqs)
	if l.cut.Load() {
		f = loseReply
	}
	if len(resent) > 0 {
		l.dupLater("batch of "+tickID(resent[0]), lost, l.dupTick(resent, f == pass))
	}
	for i, r := range reqs {
		if i < len(got) && i < len(gotErrs) {
			l.logGrant(r, got[i], gotErrs[i], issued, sent, f == pass)
			l.logVerdict(r, got[i], gotErrs[i], f == pass, false)
		}
	}
	if f == loseReply {
		return fail(l.refusal(ctx, f))
	}
	return got, gotErrs
}

// InitMarks creates absent marks; a lost reply still created them.
func (l *link) InitMarks(ctx context.Context, keys []string) error {
	defer l.hold()() // a frozen node's calls neither go out nor come back
	f, err := l.decide(ctx, "init-marks")
	if err != nil {
		return err
	}
	if f == loseFirst || f == failCall {
		return l.refusal(ctx, f)
	}
	err = l.mem.InitMarks(ctx, keys)
	if err == nil {
		l.logInitMarks(keys)
	}
	if f == loseReply || l.cut.Load() {
		return l.refusal(ctx, loseReply)
	}
	return err
}

// TryLock takes a plain lock: a concurrency group's slot. A lost reply
// took it all the same (it lapses at its TTL, a slot fewer meanwhile).
func (l *link) TryLock(ctx context.Context, key string, ttl time.Duration) (*locking.Handle, error) {
	defer l.hold()() // a frozen node's calls neither go out nor come back
	f, err := l.decide(ctx, "try-lock "+key)
	if err != nil {
		return nil, err
	}
	if f == loseFirst || f == failCall {
		return nil, l.refusal(ctx, f)
	}
	h, err := l.mem.TryLock(ctx, key, ttl)
	if f == loseReply || l.cut.Load() {
		return nil, l.refusal(ctx, loseReply)
	}
	if h != nil {
		l.c.event(l.c.clock.Now(), "%s/%d took %s fence %d", l.node, l.life, key, h.Fence())
	}
	return h, err
}

// Renew extends the lock; a lost reply extended it all the same.
func (l *link) Renew(ctx context.Context, h *locking.Handle) error {
	defer l.renewal(h.Token())() // counted until the node hears the answer
	defer l.hold()()             // a frozen node's calls neither go out nor come back
	sent := l.c.clock.Now()
	l.hung(fmt.Sprintf("renew %s fence %d", h.Key(), h.Fence()))
	f, err := l.decide(ctx, fmt.Sprintf("renew %s fence %d", h.Key(), h.Fence()))
	if err != nil {
		return err
	}
	if f == loseFirst || f == failCall {
		return l.refusal(ctx, f)
	}
	err = l.mem.Renew(ctx, h)
	if err == nil {
		l.c.leases.applied(h.Token())
	}
	l.dupLater(fmt.Sprintf("renew %s fence %d", h.Key(), h.Fence()), false, l.dupRenew(h))
	if f == loseReply || l.cut.Load() {
		return l.refusal(ctx, loseReply)
	}
	if err == nil {
		l.c.leases.heard(h.Token(), sent)
	}
	l.c.event(l.c.clock.Now(), "%s/%d renewed %s fence %d sent %s: %v", l.node, l.life, h.Key(), h.Fence(), l.c.at(sent), err)
	return err
}

// Release gives the lock back; a lost reply gave it back all the same.
func (l *link) Release(ctx context.Context, h *locking.Handle) error {
	defer l.hold()() // a frozen node's calls neither go out nor come back
	f, err := l.decide(ctx, fmt.Sprintf("release %s fence %d", h.Key(), h.Fence()))
	if err != nil {
		return err
	}
	if f == loseFirst || f == failCall {
		return l.refusal(ctx, f)
	}
	err = l.mem.Release(ctx, h)
	l.dupLater(fmt.Sprintf("release %s fence %d", h.Key(), h.Fence()), false, l.dupRelease(h))
	if f == loseReply || l.cut.Load() {
		return l.refusal(ctx, loseReply)
	}
	return err
}

// ReleaseAll is one round trip for the batch.
func (l *link) ReleaseAll(ctx context.Context, hs []*locking.Handle) []error {
	defer l.hold()() // a frozen node's calls neither go out nor come back
	errs := make([]error, len(hs))
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	f, err := l.decide(ctx, fmt.Sprintf("release batch %s fence %d", hs[0].Key(), hs[0].Fence()))
	if err != nil {
		return fail(err)
	}
	if f == loseFirst || f == failCall {
		return fail(l.refusal(ctx, f))
	}
	got := l.mem.ReleaseAll(ctx, hs)
	l.dupLater(fmt.Sprintf("release batch %s fence %d", hs[0].Key(), hs[0].Fence()), false, l.dupRelease(hs...))
	if f == loseReply || l.cut.Load() {
		return fail(l.refusal(ctx, loseReply))
	}
	return got
}

// GetPause and SetPause reach the backend without faults: no operator
// pauses anything in this cut of the simulation, and a node-local tick
// reads the flag only to learn that it is not paused.
func (l *link) GetPause(ctx context.Context, key string) (locking.Pause, error) {
	defer l.hold()() // a frozen node's calls neither go out nor come back
	if l.cut.Load() {
		return locking.Pause{}, errCut
	}
	return l.mem.GetPause(ctx, key)
}

// SetPause: see GetPause.
func (l *link) SetPause(ctx context.Context, key string, p locking.Pause) error {
	defer l.hold()() // a frozen node's calls neither go out nor come back
	if l.cut.Load() {
		return errCut
	}
	return l.mem.SetPause(ctx, key, p)
}

// grant is one acquisition the backend applied (try-lock-tick granted).
type grant struct {
	node     string
	life     int
	key      string
	tick     time.Time
	perTick  bool
	fence    int64
	token    string
	ttl      time.Duration
	at       time.Time // true time the backend granted it
	issued   uint64    // cluster.seq before the call reached the backend
	returned uint64    // cluster.seq after it returned
	// delivered: the node heard the grant (the reply was not lost).
	delivered bool
	// manual: a take of a manual run's request (tick is the run's, runID
	// the request's id); backfill: of a backfill's.
	manual, backfill bool
	runID            string
	// dup: made by a duplicated call's copy (link_dup.go), heard by no
	// one; origHeard: the node heard the original call's answer.
	dup, origHeard bool
}

// grantLog is the backend's log of grants, kept by the links.
type grantLog struct {
	mu sync.Mutex
	gs []grant
}

func (g *grantLog) add(x grant) {
	g.mu.Lock()
	g.gs = append(g.gs, x)
	g.mu.Unlock()
}

func (g *grantLog) all() []grant {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]grant(nil), g.gs...)
}

// leaseLog keeps, per acquisition (token), the send times of the calls
// that took or extended its lock and whose success the node heard: the
// node's lease runs from the last of them (DESIGN step 6).
type leaseLog struct {
	mu    sync.Mutex
	sends map[string][]time.Time
	// died: the tokens a renewal of which was under way when its node
	// crashed (link.kill): the node never heard its answer.
	died map[string]bool
	// renewed: the tokens a renewal of which the backend applied, heard
	// or not.
	renewed map[string]bool
}

func (g *leaseLog) applied(token string) {
	g.mu.Lock()
	if g.renewed == nil {
		g.renewed = map[string]bool{}
	}
	g.renewed[token] = true
	g.mu.Unlock()
}

// everRenewed reports whether the backend applied a renewal of token.
func (g *leaseLog) everRenewed(token string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.renewed[token]
}

// renewal counts a renewal of token under way on l until the returned
// func is called.
func (l *link) renewal(token string) func() {
	l.mu.Lock()
	if l.renewing == nil {
		l.renewing = map[string]int{}
	}
	l.renewing[token]++
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.renewing[token]--
		l.mu.Unlock()
	}
}

func (g *leaseLog) diedRenewing(token string) {
	g.mu.Lock()
	if g.died == nil {
		g.died = map[string]bool{}
	}
	g.died[token] = true
	g.mu.Unlock()
}

// renewingAtCrash reports whether a renewal of token was under way when
// its node crashed.
func (g *leaseLog) renewingAtCrash(token string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.died[token]
}

func (g *leaseLog) heard(token string, sent time.Time) {
	g.mu.Lock()
	if g.sends == nil {
		g.sends = map[string][]time.Time{}
	}
	g.sends[token] = append(g.sends[token], sent)
	g.mu.Unlock()
}

// lastBefore is the last send time heard of token at or before t (ok
// false when none).
func (g *leaseLog) lastBefore(token string, t time.Time) (last time.Time, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.sends[token] {
		if !s.After(t) && (!ok || s.After(last)) {
			last, ok = s, true
		}
	}
	return last, ok
}
