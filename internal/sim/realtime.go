package sim

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/faultproxy"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/pg"
	"github.com/bext-dev/bext-scheduler/locking/redis"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Real time: the same plan, carried out on the real clock against a real
// Redis or Postgres, so that their Lua and SQL face the invariants the
// memory backend faces (real_test.go, make cluster-test). The nodes run
// on scheduler.RealClock (the production path: the lease clock is
// CLOCK_BOOTTIME) offset by their life's offset; each node life has a
// Locker of its own, as a process would, behind its link, whose faults
// are the fake clock's (a stall really waits). The harness's loop waits
// real time for its next event instead of stepping and quiescing, and the
// ledger's true time is the real clock, which is also the backend's (the
// server runs on this machine).
//
// The plan is drawn as TestSim draws it, then compressed into a shorter
// span (every time in it scaled by one factor, clock offsets kept) and
// moved to start now.

// realPlan returns seed's plan compressed into span (when longer) and
// starting at start: a copy, p is not changed.
func realPlan(p *plan, start time.Time, span time.Duration) *plan {
	f := 1.0
	if p.span > span {
		f = float64(span) / float64(p.span)
	}
	at := func(t time.Time) time.Time {
		return start.Add(time.Duration(float64(t.Sub(p.start)) * f).Round(time.Millisecond))
	}
	q := *p
	q.start, q.span = start, time.Duration(float64(p.span)*f).Round(time.Millisecond)
	q.nodes = make([]nodePlan, len(p.nodes))
	for i, n := range p.nodes {
		m := nodePlan{id: n.id}
		for _, l := range n.lives {
			l.from, l.to = at(l.from), at(l.to)
			m.lives = append(m.lives, l)
		}
		for _, w := range n.faults {
			w.from, w.to = at(w.from), at(w.to)
			m.faults = append(m.faults, w)
		}
		q.nodes[i] = m
	}
	q.pauses = nil
	for _, w := range p.pauses {
		w.from, w.to = at(w.from), at(w.to)
		q.pauses = append(q.pauses, w)
	}
	// A real server loses no state on the harness's word: its data loss
	// (a Redis FLUSHALL, a restart without persistence) is the e2e long
	// run's fault, and the simulation's losses are the memory backend's
	// (loss.go).
	q.losses = nil
	// Nor does it carry out the operators' reloads, triggers and
	// backfills, or freeze nodes (plan_ops.go, freeze.go): their times are
	// the fake clock's (not scaled here), and the real backends' request
	// queues are not wired to the harness.
	q.ops, q.freezes = nil, nil
	return &q
}

// now is the time the harness's loop acts at: the fake clock's, or in
// real time the plan's time it last waited for, so that an event due at
// t is carried out as due at t (operate compares times exactly).
func (c *cluster) now() time.Time {
	if c.fake != nil {
		return c.clock.Now()
	}
	return c.nominal
}

// wait is advance in real time: it waits until d past the last time
// waited for (at once when the harness is that late already), then ends
// the backend clients of the lives whose process exited.
func (c *cluster) wait(d time.Duration) error {
	c.nominal = c.nominal.Add(d)
	if left := time.Until(c.nominal); left > 0 {
		t := time.NewTimer(left)
		<-t.C // the plan's next event is due then: nothing to be told about
	}
	if rb, ok := c.mem.(*realBackend); ok {
		for _, l := range c.lives {
			if closed(l.done) {
				rb.finish(l.node, l.life)
			}
		}
	}
	return nil
}

// realBackend is Redis or Postgres shared by a real-time cluster: the
// clients of the node lives (each finished once its process exited), the
// operator's own client, and what the operator's pauses did when.
type realBackend struct {
	name  string
	admin interface {
		locking.Pauser
		Close(context.Context) error
	}
	open    func(node string, life int) (realNode, error)
	cleanup func(context.Context) error // drops the cluster's keys or rows

	mu      sync.Mutex
	nodes   map[[2]any]realNode
	done    map[[2]any]bool
	errs    []error // what the harness failed to do on the backend
	seq     func() uint64
	paused  map[string]pauseMark // by schedule: the pause's SetPause returned
	resumed map[string]time.Time // by schedule: the resume's SetPause was sent
}

// realNode is one node life's client of a real backend.
type realNode interface {
	nodeLocker
	// finish ends the client once the life's process exited.
	finish()
	// outlives reports whether what the client holds must outlive the
	// process: its finish then waits for the end of the run (a crashed
	// life's Redis locks live out their TTL).
	outlives() bool
}

// pauseMark is when a pause's SetPause returned, in true time and in the
// order of calls (cluster.seq).
type pauseMark struct {
	at  time.Time
	seq uint64
}

var _ backend = (*realBackend)(nil)

func (b *realBackend) peer(node string, life int) nodeLocker {
	n, err := b.open(node, life)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		// Opening does not connect (both backends connect lazily), so
		// this is a bad URL: the life's calls all fail, and so does the
		// test (close).
		b.errs = append(b.errs, err)
		return failedNode{err}
	}
	b.nodes[[2]any{node, life}] = n
	return n
}

// finish ends the client of a life whose process exited, once.
func (b *realBackend) finish(node string, life int) {
	b.mu.Lock()
	k := [2]any{node, life}
	n, ok := b.nodes[k]
	if !ok || b.done[k] || n.outlives() {
		b.mu.Unlock()
		return
	}
	b.done[k] = true
	b.mu.Unlock()
	n.finish()
}

// fail notes something the harness could not do on the backend.
func (b *realBackend) fail(err error) {
	b.mu.Lock()
	b.errs = append(b.errs, err)
	b.mu.Unlock()
}

// close ends every client still open, and the cluster's keys or rows.
func (b *realBackend) close() error {
	b.mu.Lock()
	var rest []realNode
	for k, n := range b.nodes {
		if !b.done[k] {
			b.done[k] = true
			rest = append(rest, n)
		}
	}
	b.mu.Unlock()
	for _, n := range rest {
		n.finish()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := []error{b.cleanup(ctx), b.admin.Close(ctx)}
	b.mu.Lock()
	errs = append(errs, b.errs...)
	b.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sim: %s: %w", b.name, err)
	}
	return nil
}

// SetPause is the operator's: it notes when a pause returned (and which
// calls came after) and when a resume was first sent, which is what the
// invariant 6b is about; on the fake clock those are the plan's times.
// Unlike the memory backend, a real one may fail (a connection that took
// too long on a loaded machine): the operator tries again, as one would,
// for up to pauseTries. A resume that failed may have been applied all
// the same, so its first send ends the window the check holds to.
func (b *realBackend) SetPause(ctx context.Context, key string, p locking.Pause) error {
	if !p.Paused {
		b.mu.Lock()
		b.resumed[key] = time.Now()
		b.mu.Unlock()
	}
	var err error
	for deadline, wait := time.Now().Add(pauseTries), 100*time.Millisecond; ; wait = min(2*wait, time.Second) {
		if err = b.admin.SetPause(ctx, key, p); err == nil || time.Now().Add(wait).After(deadline) {
			break
		}
		t := time.NewTimer(wait) // the backend cannot tell when it would answer
		<-t.C
	}
	if p.Paused {
		m := pauseMark{at: time.Now(), seq: b.seq()}
		b.mu.Lock()
		b.paused[key] = m
		b.mu.Unlock()
	}
	return err
}

func (b *realBackend) GetPause(ctx context.Context, key string) (locking.Pause, error) {
	return b.admin.GetPause(ctx, key)
}

// pauseTries is how long the operator keeps trying a pause or resume.
const pauseTries = 20 * time.Second

// failedNode is the client of a life that could not have one.
type failedNode struct{ err error }

func (f failedNode) TryLockTick(context.Context, locking.TickRequest) (locking.TickAnswer, error) {
	return locking.TickAnswer{}, f.err
}

func (f failedNode) TryLockTicks(_ context.Context, reqs []locking.TickRequest) ([]locking.TickAnswer, []error) {
	errs := make([]error, len(reqs))
	for i := range errs {
		errs[i] = f.err
	}
	return make([]locking.TickAnswer, len(reqs)), errs
}
func (f failedNode) InitMarks(context.Context, []string) error { return f.err }
func (f failedNode) TryLock(context.Context, string, time.Duration) (*locking.Handle, error) {
	return nil, f.err
}
func (f failedNode) Renew(context.Context, *locking.Handle) error   { return f.err }
func (f failedNode) Release(context.Context, *locking.Handle) error { return f.err }
func (f failedNode) GetPause(context.Context, string) (locking.Pause, error) {
	return locking.Pause{}, f.err
}
func (f failedNode) SetPause(context.Context, string, locking.Pause) error { return f.err }
func (f failedNode) ReleaseAll(_ context.Context, hs []*locking.Handle) []error {
	errs := make([]error, len(hs))
	for i := range errs {
		errs[i] = f.err
	}
	return errs
}

// simulateReal carries out p (a realPlan) in real time on b, and closes
// b. p's pause windows and the ends of its lives are then set to when
// they took effect (see settle).
func simulateReal(p *plan, b *realBackend) (*cluster, error) {
	c := &cluster{plan: p, clock: scheduler.RealClock(), mem: b, nominal: p.start,
		skips: map[skipKey]scheduler.SkipReason{}}
	b.seq = func() uint64 { return c.seq.Add(1) }
	if left := time.Until(p.start); left > 0 {
		t := time.NewTimer(left)
		<-t.C
	}
	c, err := c.simulate()
	err = errors.Join(err, b.close())
	c.settle(b)
	return c, err
}

// settle sets the plan's times to those the real run carried out, where
// the invariants read the plan and the harness acted a little after the
// time it waited for. A pause begins when its SetPause returned, or when
// the last grant of its schedule whose call was under way by then
// returned, whichever is later (a call the backend decided before the
// pause may return after it); a resume ends it when it was sent. A life
// ended early ends when it was crashed or stopped.
func (c *cluster) settle(b *realBackend) {
	b.mu.Lock()
	defer b.mu.Unlock()
	gs := c.grants.all()
	for i := range c.plan.pauses {
		w := &c.plan.pauses[i]
		if m, ok := b.paused[w.sched]; ok {
			w.from = m.at
			for _, g := range gs {
				if g.key == w.sched && g.issued < m.seq && g.at.After(w.from) {
					w.from = g.at
				}
			}
		}
		if t, ok := b.resumed[w.sched]; ok && !w.until {
			w.to = t
		}
	}
	for _, l := range c.lives {
		if !l.endedAt.IsZero() {
			for i := range c.plan.nodes {
				if c.plan.nodes[i].id == l.node {
					c.plan.nodes[i].lives[l.life].to = l.endedAt
				}
			}
		}
	}
}

func newRealBackend(name string) *realBackend {
	return &realBackend{name: name, nodes: map[[2]any]realNode{}, done: map[[2]any]bool{},
		paused: map[string]pauseMark{}, resumed: map[string]time.Time{}}
}

// Redis: every node life a Locker (and client) of its own under one key
// prefix, fresh per seed, so that seeds running at once never meet.

// A proxier starts a TCP fault proxy to a target address for one node
// life (faultproxy.Start under the test running the seeds).
type proxier func(target string) *faultproxy.Proxy

// newRedisBackend opens the operator's Locker under prefix. With proxy,
// each node life reaches Redis through a fault proxy of its own, and its
// link's stall windows are the proxy's (proxiedNode): the requests of a
// stalled life really sit in the network, and land on the server when the
// window ends, after their callers gave up on them: Lua scripts applied
// late, as a partition that heals delivers them.
func newRedisBackend(url, prefix string, proxy proxier) (*realBackend, error) {
	b := newRealBackend("redis")
	admin, err := redis.Open(redis.Options{URL: url, KeyPrefix: prefix, Holder: "operator"})
	if err != nil {
		return nil, err
	}
	// Connected at once: an unreachable server fails the seed here.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.GetPause(ctx, "sim"); err != nil {
		_ = admin.Close(ctx)
		return nil, fmt.Errorf("sim: the operator's Redis client: %w", err)
	}
	b.admin = admin
	b.open = func(node string, life int) (realNode, error) {
		u, px, err := proxied(url, proxy)
		if err != nil {
			return nil, err
		}
		l, err := redis.Open(redis.Options{URL: u, KeyPrefix: prefix, Holder: fmt.Sprintf("%s/%d", node, life)})
		if err != nil {
			return nil, err
		}
		return &redisNode{Locker: l, netStall: netStall{px: px}}, nil
	}
	b.cleanup = func(ctx context.Context) error {
		opt, err := goredis.ParseURL(url)
		if err != nil {
			return err
		}
		cl := goredis.NewClient(opt)
		defer cl.Close()
		var keys []string
		it := cl.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("sim: listing the run's Redis keys: %w", err)
		}
		for _, k := range keys { // one by one: keys of many slots
			if err := cl.Del(ctx, k).Err(); err != nil {
				return fmt.Errorf("sim: deleting the run's Redis keys: %w", err)
			}
		}
		return nil
	}
	return b, nil
}

// redisNode is a life's Redis client. A crash needs nothing of it (the
// link is cut; the locks live out their TTL on the server).
type redisNode struct {
	*redis.Locker
	netStall

	mu   sync.Mutex
	dead bool
}

// netStall is a node life's fault proxy, when it dials through one.
type netStall struct {
	px *faultproxy.Proxy // nil: the life dials its backend directly

	mu     sync.Mutex
	healAt time.Time   // the end of the proxy's current stall
	heal   *time.Timer // heals the proxy then
}

// proxied returns url with its host replaced by a new proxy's to it, and
// the proxy; url and nil without proxy.
func proxied(url string, proxy proxier) (string, *faultproxy.Proxy, error) {
	if proxy == nil {
		return url, nil, nil
	}
	u, err := neturl.Parse(url)
	if err != nil {
		return "", nil, fmt.Errorf("sim: the backend's URL: %w", err)
	}
	px := proxy(u.Host)
	u.Host = px.Addr()
	return u.String(), px, nil
}

// A proxiedNode is a node client whose link stalls are a TCP proxy's
// (link.decide): stall blackholes its traffic until until, and reports
// false when the client has no proxy (the link then stalls the call
// itself).
type proxiedNode interface {
	stall(until time.Time) bool
}

func (n *netStall) stall(until time.Time) bool {
	if n.px == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !until.After(n.healAt) {
		return true // stalled until then already
	}
	if n.heal != nil {
		n.heal.Stop()
	}
	n.px.Blackhole()
	n.healAt = until
	n.heal = time.AfterFunc(time.Until(until), n.px.Heal)
	return true
}

// unstall heals the proxy for good: a client's Close whose last calls sat
// in a blackhole would wait out its whole timeout.
func (n *netStall) unstall() {
	if n.px == nil {
		return
	}
	n.mu.Lock()
	if n.heal != nil {
		n.heal.Stop()
	}
	n.healAt = time.Time{}
	n.mu.Unlock()
	n.px.Heal()
}

func (n *redisNode) crash() {
	n.mu.Lock()
	n.dead = true
	n.mu.Unlock()
}

func (n *redisNode) outlives() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dead
}

// finish closes the Locker and its client (a stopped life released its
// locks itself; a crashed one's are released only after the run).
func (n *redisNode) finish() {
	n.unstall()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = n.Close(ctx)
}

// Postgres: every node life a Locker (sessions of its own, named by
// application_name) in one namespace, fresh per seed. A crash ends the
// life's sessions on the server (pg_terminate_backend), as the death of
// its process does: its advisory locks end with them.

// pgSessions bounds a life's connections: a seed runs up to five lives
// at once, and seeds run side by side on a server others use too.
const pgSessions = 2

// newPGBackend opens the operator's Locker and connection in namespace ns.
//
// With proxy, each node life reaches Postgres through a fault proxy of its
// own, and its stall windows are the proxy's, as on Redis: a statement
// stalled past its deadline is given up by the client, whose session is
// then abandoned (locking/pg/gate.go), not closed, so that the other
// locks on it stay held for as long as their holders may count on them.
func newPGBackend(ctx context.Context, url, ns string, proxy proxier) (*realBackend, error) {
	b := newRealBackend("postgres")
	withApp := func(app string) string {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		return url + sep + "application_name=" + app
	}
	admin, err := pg.Open(ctx, pg.Options{URL: withApp(ns + "_operator"), Namespace: ns, MaxSessions: 1, Holder: "operator"})
	if err != nil {
		return nil, err
	}
	// Connected at once (and the table made): an unreachable server fails
	// the seed here.
	if _, err := admin.GetPause(ctx, "sim"); err != nil {
		_ = admin.Close(ctx)
		return nil, fmt.Errorf("sim: the operator's Postgres Locker: %w", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		_ = admin.Close(ctx)
		return nil, fmt.Errorf("sim: the operator's Postgres connection: %w", err)
	}
	var cmu sync.Mutex // conn serves one statement at a time
	b.admin = admin
	b.open = func(node string, life int) (realNode, error) {
		app := fmt.Sprintf("%s_%s_%d", ns, strings.ReplaceAll(node, "-", ""), life)
		u, px, err := proxied(withApp(app), proxy)
		if err != nil {
			return nil, err
		}
		l, err := pg.Open(context.Background(), pg.Options{URL: u, Namespace: ns,
			MaxSessions: pgSessions, Holder: fmt.Sprintf("%s/%d", node, life)})
		if err != nil {
			return nil, err
		}
		return &pgNode{Locker: l, netStall: netStall{px: px}, kill: func() {
			cmu.Lock()
			defer cmu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			// The timeout argument waits for each backend to be gone.
			var gone bool
			err := conn.QueryRow(ctx, `SELECT coalesce(bool_and(pg_terminate_backend(pid, 10000)), true)
				FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&gone)
			if err == nil && !gone {
				err = errors.New("a session outlived pg_terminate_backend's 10s")
			}
			if err != nil {
				b.fail(fmt.Errorf("sim: ending the sessions of crashed %s/%d: %w", node, life, err))
			}
		}}, nil
	}
	b.cleanup = func(ctx context.Context) error {
		cmu.Lock()
		defer cmu.Unlock()
		defer conn.Close(context.Background())
		// The table exists unless no node ever reached Postgres.
		if _, err := conn.Exec(ctx, `DELETE FROM bext_lock_fences WHERE namespace = $1`, ns); err != nil &&
			!strings.Contains(err.Error(), "does not exist") {
			return fmt.Errorf("sim: deleting the run's rows: %w", err)
		}
		return nil
	}
	return b, nil
}

// pgNode is a life's Postgres client.
type pgNode struct {
	*pg.Locker
	netStall
	kill func()
}

// crash ends the life's sessions on the server: what the death of its
// process does to them. A session the Locker opens after (a call that was
// under way) holds nothing of before, and ends with finish.
func (n *pgNode) crash() { n.kill() }

// outlives is false: nothing of a Postgres client outlives its process.
func (n *pgNode) outlives() bool { return false }

func (n *pgNode) finish() {
	n.unstall()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = n.Close(ctx)
}
