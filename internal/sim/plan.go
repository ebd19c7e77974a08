package sim

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// A plan is everything one seed decides before the cluster starts: the
// schedules, the nodes and their clock offsets, every fault window and
// every crash, stop and restart. The harness only carries it out.

// Fixed options of every simulated cluster.
const (
	maxSkew       = time.Second
	safetyMargin  = 2 * time.Second
	shutdownGrace = 8 * time.Second
	// step is how far the fake clock moves between two quiescent states.
	step = time.Second
)

// plan is one seed's scenario.
type plan struct {
	seed   uint64
	start  time.Time     // the fake clock's start (a whole minute)
	span   time.Duration // how long the cluster runs before it is stopped
	scheds []schedPlan
	nodes  []nodePlan
	// pauses are operators' pauses of schedules, at most one each.
	pauses []pauseWindow
	// ops are the other operators' actions (plan_ops.go), in draw order.
	ops []opAction
	// freezes are lives frozen for a while (freeze.go).
	freezes []freezeWindow
	// losses are the backend's losses of state (loss.go), in time order.
	losses []stateLoss
	// hashKey makes the per-call decisions (link.go) a function of the
	// seed and the call's identity.
	hashKey uint64
}

// schedPlan is one schedule and what its jobs do.
type schedPlan struct {
	scheduler.Schedule
	period time.Duration
	// failRate is the chance an attempt fails (a retry follows, if any).
	failRate float64
	// maxRun bounds a job's duration; some draws pass the lease.
	maxRun time.Duration
	// ignoreTerm: the job goes on for killGrace after its context ends
	// (workload.go).
	ignoreTerm bool
	// rerun: on_node_loss = "rerun" (rerun.go).
	rerun bool
}

// nodePlan is one node id over the whole run: its incarnations, each a
// scheduler process with its own clock offset, and its link's faults.
type nodePlan struct {
	id    string
	tags  []string // its tags (workload.go's targeting)
	lives []life
	// faults are windows of the link's trouble, in true (backend) time.
	faults []faultWindow
}

// life is one incarnation of a node: it starts at from and ends at to
// (the plan's span for the last one) by a crash or a graceful stop.
type life struct {
	from, to time.Time
	crash    bool          // ends without release or history
	offset   time.Duration // its clock minus the true time
}

// beyondSkew reports whether the life's clock is off by more than the
// cluster tolerates: such a node is not counted healthy.
func (l life) beyondSkew() bool { return l.offset > maxSkew || l.offset < -maxSkew }

// faultKind is what a link does during a fault window.
type faultKind uint8

const (
	// flaky: each call independently fails before the backend sees it,
	// loses its reply after the backend applied it, or errs.
	flaky faultKind = iota + 1
	// stall: every call waits until the window ends, then goes through
	// (an answer later than the caller's deadline, on the lease clock).
	stall
)

func (k faultKind) String() string {
	switch k {
	case flaky:
		return "flaky"
	case stall:
		return "stall"
	case dup:
		return "dup"
	case hang:
		return "hang"
	}
	return fmt.Sprintf("fault(%d)", uint8(k))
}

type faultWindow struct {
	kind     faultKind
	from, to time.Time
}

func (w faultWindow) covers(t time.Time) bool { return !t.Before(w.from) && t.Before(w.to) }

// periods are the schedules' periods: every second to every few minutes.
var periods = []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second,
	10 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute}

// newPlan draws seed's scenario.
func newPlan(seed uint64) *plan {
	r := rand.New(rand.NewPCG(seed, 0x5eed5eed))
	p := &plan{
		seed:    seed,
		start:   time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
		span:    time.Duration(75+r.IntN(76)) * time.Second,
		hashKey: r.Uint64(),
	}
	dst := p.drawDSTStart(rand.New(rand.NewPCG(seed, 0xd57d57)))
	for i := range 2 + r.IntN(4) {
		p.scheds = append(p.scheds, drawSchedule(r, i))
	}
	p.drawReruns(rand.New(rand.NewPCG(seed, 0x4e4e)))
	calm := r.IntN(10) == 0 // a tenth of the seeds: no faults at all
	for i := range 3 + r.IntN(3) {
		p.nodes = append(p.nodes, p.drawNode(r, i, calm))
	}
	if !calm {
		// A stream of its own, so that the rest of a seed's plan stays
		// what it was before pauses were drawn.
		p.drawPauses(rand.New(rand.NewPCG(seed, 0x9a05e)))
		p.drawOps(rand.New(rand.NewPCG(seed, 0x0e7a7e)))
		p.drawDups(rand.New(rand.NewPCG(seed, 0xd0b1e)))
		p.drawFreezes(rand.New(rand.NewPCG(seed, 0xf2ee2e)))
		p.drawHangs(rand.New(rand.NewPCG(seed, 0x4a96)))
		p.drawLosses(rand.New(rand.NewPCG(seed, 0x105e)))
	}
	p.drawWorkload(rand.New(rand.NewPCG(seed, 0x3017)), dst)
	p.drawTargets(rand.New(rand.NewPCG(seed, 0x7a65)))
	p.drawGroups(rand.New(rand.NewPCG(seed, 0x6e0)))
	p.drawStopPoints(rand.New(rand.NewPCG(seed, 0x5709)))
	return p
}

// pauseWindow is an operator's pause of a schedule: set at from, lifted
// at to, by a resume or by the pause's own end time (until).
type pauseWindow struct {
	sched    string
	from, to time.Time
	until    bool // the pause ends by itself (Pause.Until); else a resume
}

// drawPauses pauses a quarter of the schedules once each.
func (p *plan) drawPauses(r *rand.Rand) {
	for _, sp := range p.scheds {
		if r.IntN(4) != 0 {
			continue
		}
		from := p.start.Add(time.Duration(10+r.Int64N(int64(p.span/time.Second)-40))*time.Second +
			time.Duration(r.IntN(1000))*time.Millisecond)
		p.pauses = append(p.pauses, pauseWindow{sched: sp.ID, from: from,
			to: from.Add(time.Duration(5+r.IntN(35)) * time.Second), until: r.IntN(2) == 0})
	}
}

func drawSchedule(r *rand.Rand, i int) schedPlan {
	period := periods[r.IntN(len(periods))]
	sp := schedPlan{period: period}
	sc := &sp.Schedule
	sc.ID = fmt.Sprintf("s%d", i)
	if period < time.Minute {
		sc.CronExpr = fmt.Sprintf("*/%d * * * * *", int(period/time.Second))
	} else {
		sc.CronExpr = fmt.Sprintf("0 */%d * * * *", int(period/time.Minute))
	}
	switch x := r.IntN(20); {
	case x < 14:
		sc.Hint = hints.RequireGlobal
	case x < 17:
		sc.Hint = hints.PreferGlobal
	default:
		sc.Hint = hints.NodeLocal
	}
	sc.Overlap = scheduler.OverlapSkip
	switch r.IntN(8) { // one draw, as before queue: the other seeds keep their plans
	case 0, 1:
		sc.Overlap = scheduler.OverlapAllow
	case 2:
		sc.Overlap = scheduler.OverlapQueue
		if r.IntN(2) == 0 {
			sc.Overlap = scheduler.OverlapReplace
		}
	}
	sc.ExpectedRuntime = time.Duration(1+r.IntN(8)) * time.Second
	if r.IntN(2) == 0 {
		sc.Jitter = time.Duration(1+r.IntN(3)) * time.Second
	}
	if r.IntN(3) == 0 {
		sc.Retries = 1 + r.IntN(2)
		sc.RetryBackoff = time.Duration(1+r.IntN(3)) * time.Second
		sp.failRate = 0.3
	} else if r.IntN(4) == 0 {
		sp.failRate = 0.2
	}
	// Most jobs end well within their expected runtime; a fifth may run
	// past their lease (TTL = expected + jitter + margin), which only
	// renewals keep safe.
	sp.maxRun = sc.ExpectedRuntime
	if r.IntN(5) == 0 {
		sp.maxRun = 3 * (sc.ExpectedRuntime + sc.Jitter + safetyMargin)
	}
	return sp
}

// drawNode draws node i's lives and faults.
func (p *plan) drawNode(r *rand.Rand, i int, calm bool) nodePlan {
	n := nodePlan{id: fmt.Sprintf("node-%d", i)}
	end := p.start.Add(p.span)
	at := p.start
	for {
		l := life{from: at, to: end, offset: drawOffset(r)}
		// Most nodes live through; some crash or stop, then come back.
		if !calm && r.IntN(3) == 0 {
			die := at.Add(time.Duration(10+r.IntN(60))*time.Second + time.Duration(r.IntN(1000))*time.Millisecond)
			if die.Before(end.Add(-20 * time.Second)) {
				l.to, l.crash = die, r.IntN(2) == 0
				n.lives = append(n.lives, l)
				at = die.Add(time.Duration(2+r.IntN(20)) * time.Second)
				continue
			}
		}
		n.lives = append(n.lives, l)
		break
	}
	if !calm {
		for range r.IntN(4) {
			from := p.start.Add(time.Duration(r.Int64N(int64(p.span))))
			kind := flaky
			if r.IntN(3) == 0 {
				kind = stall
			}
			n.faults = append(n.faults, faultWindow{kind: kind, from: from,
				to: from.Add(time.Duration(2+r.IntN(20)) * time.Second)})
		}
	}
	return n
}

// drawOffset is a life's clock offset: within max_clock_skew nine times
// in ten, beyond it (up to four times, either way) otherwise.
func drawOffset(r *rand.Rand) time.Duration {
	if r.IntN(10) == 0 {
		d := maxSkew + time.Duration(r.Int64N(int64(3*maxSkew)))
		if r.IntN(2) == 0 {
			d = -d
		}
		return d
	}
	return time.Duration(r.Int64N(int64(18*maxSkew/10))) - 9*maxSkew/10
}

// chance reports, for the call named by parts, an event of probability
// prob: a pure function of the seed and the parts.
func (p *plan) chance(prob float64, parts ...any) bool {
	return p.draw(parts...) < prob
}

// draw is a number in [0, 1) hashed (FNV-1a, the same in every process,
// so a replay draws the same) from the seed and parts.
func (p *plan) draw(parts ...any) float64 {
	h := fnv.New64a()
	fmt.Fprint(h, p.hashKey)
	for _, x := range parts {
		fmt.Fprint(h, "|", x)
	}
	// FNV's low bits mix poorly: PCG spreads the sum over all 64 bits.
	return rand.New(rand.NewPCG(h.Sum64(), p.seed)).Float64()
}

// String describes the plan for a failure report.
func (p *plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  span %v\n", p.span)
	for _, s := range p.scheds {
		fmt.Fprintf(&b, "  %s %q %s overlap %s expected %v jitter %v retries %d fail %.1f max run %v%s\n",
			s.ID, s.CronExpr, s.Hint, s.Overlap, s.ExpectedRuntime, s.Jitter, s.Retries, s.failRate, s.maxRun, s.workloadString())
	}
	for _, n := range p.nodes {
		fmt.Fprintf(&b, "  %s:", n.id)
		if len(n.tags) > 0 {
			fmt.Fprintf(&b, " tags %q", n.tags)
		}
		for _, l := range n.lives {
			end := "stop"
			if l.crash {
				end = "crash"
			}
			fmt.Fprintf(&b, " [+%v..+%v %s, offset %v]", l.from.Sub(p.start), l.to.Sub(p.start), end, l.offset)
		}
		for _, w := range n.faults {
			fmt.Fprintf(&b, " %s +%v..+%v", w.kind, w.from.Sub(p.start), w.to.Sub(p.start))
		}
		b.WriteString("\n")
	}
	for _, w := range p.pauses {
		fmt.Fprintf(&b, "  pause %s +%v..+%v (until: %v)\n", w.sched, w.from.Sub(p.start), w.to.Sub(p.start), w.until)
	}
	b.WriteString(p.opsString())
	b.WriteString(p.freezesString())
	for _, w := range p.losses {
		fmt.Fprintf(&b, "  backend loses state at +%v: %v\n", w.at.Sub(p.start), w)
	}
	return b.String()
}
