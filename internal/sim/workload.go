package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The wider workload, drawn from streams of their own so that
// the rest of a seed's plan stays what it was:
//
//   - a daylight-saving change inside the span: a sixth of the seeds start
//     a minute before one in America/New_York (spring forward or fall
//     back) and run one more schedule, in that zone, firing every ten
//     seconds in the local hours 1 and 3 (the hour skipped in spring lies
//     between them; the hour repeated in autumn is hour 1);
//   - spread: a quarter of the schedules get the widest spread their
//     periods allow (the config refuses one not below the period);
//   - jobs that ignore SIGTERM: a fifth of the schedules' jobs go on after
//     their context ends until the kill grace has passed, as a command
//     that traps SIGTERM is killed by jobs.Command: for a locked job after
//     half the safety margin, at least a second (OPERATING.md "Signals");
//   - node targeting: a third of the seeds tag their nodes (role=a or
//     role=b, and zone=1 on some) and target a third of the schedules
//     without operator actions at role=a, role=b or role=a plus zone=1
//     (drawTargets). Invariant 1t: no run of a targeted schedule on a node
//     its tags do not match; liveness counts only the nodes that match;
//   - concurrency groups: a third of the seeds put two to four schedules
//     (locked or node-local) without operator actions in one group of one or two
//     (drawGroups), some waiting for a slot (group_wait). Invariant 1g: at
//     no instant more runs of the group than its max_running, but for runs
//     a freeze or a lost backend state excuses, as for overlap (invariant
//     3). Liveness does not judge grouped schedules (a full group skips).

// killGrace is the SIGTERM to SIGKILL grace of a locked job: half the
// safety margin, at least a second.
const killGrace = max(safetyMargin/2, time.Second)

// dstZone is the zone of the DST schedule.
var dstZone = func() *time.Location {
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(fmt.Sprintf("sim: no zone data for the DST schedule: %v", err))
	}
	return loc
}()

// dstStarts are a minute before a change in America/New_York: 2026-03-08
// 02:00 EST becomes 03:00 EDT; 2026-11-01 02:00 EDT becomes 01:00 EST.
var dstStarts = []time.Time{
	time.Date(2026, 3, 8, 6, 59, 0, 0, time.UTC),
	time.Date(2026, 11, 1, 5, 59, 0, 0, time.UTC),
}

// drawDSTStart moves a sixth of the seeds' start a minute before a DST
// change (before anything else is drawn: every other time is drawn
// relative to the start). It reports whether it did.
func (p *plan) drawDSTStart(r *rand.Rand) bool {
	if r.IntN(6) != 0 {
		return false
	}
	p.start = dstStarts[r.IntN(len(dstStarts))]
	return true
}

// drawWorkload gives the schedules spread and SIGTERM-ignoring jobs, and
// adds the DST schedule when dst.
func (p *plan) drawWorkload(r *rand.Rand, dst bool) {
	for i := range p.scheds {
		sp := &p.scheds[i]
		sp.ignoreTerm = r.IntN(5) == 0
		if r.IntN(4) != 0 {
			continue
		}
		minP := sp.period
		if op, ok := p.reloadOf(sp.ID); ok {
			minP = min(minP, op.period)
		}
		if minP >= 3*time.Second {
			sp.Spread = minP - time.Second
		}
	}
	if !dst {
		return
	}
	sp := schedPlan{period: 10 * time.Second, maxRun: 3 * time.Second}
	sp.ID, sp.CronExpr, sp.Location = "sdst", "*/10 * 1,3 * * *", dstZone
	sp.Hint, sp.Overlap, sp.ExpectedRuntime = hints.RequireGlobal, scheduler.OverlapSkip, 3*time.Second
	if r.IntN(2) == 0 {
		sp.Overlap = scheduler.OverlapAllow
	}
	p.scheds = append(p.scheds, sp)
}

// workloadString is what plan.String adds to a schedule's line.
func (s schedPlan) workloadString() string {
	var out string
	if s.Location != nil {
		out += " zone " + s.Location.String()
	}
	if s.Spread > 0 {
		out += fmt.Sprintf(" spread %v (offset %v)", s.Spread, cronspec.SpreadOffset(s.ID, s.Spread))
	}
	if s.ignoreTerm {
		out += " ignores SIGTERM"
	}
	if s.rerun {
		out += " on_node_loss rerun"
	}
	if len(s.Nodes) > 0 {
		out += fmt.Sprintf(" nodes %q", s.Nodes)
	}
	if s.Group != "" {
		out += fmt.Sprintf(" group %s max %d wait %v", s.Group, s.GroupMax, s.GroupWait)
	}
	return out
}

// spec is the spec a tick of sp follows under cron (the schedule's own or
// a reload's): in its zone, with its spread, as the scheduler compiles it.
func (sp *schedPlan) spec(cron string) cronspec.Spec {
	loc := sp.Location
	if loc == nil {
		loc = time.UTC
	}
	spec, err := cronspec.Parse(cron, loc)
	if err != nil {
		panic(fmt.Sprintf("sim: plan's spec %q: %v", cron, err))
	}
	return cronspec.ApplySpread(spec, sp.ID, sp.Spread)
}

// outlastTerm is what a job that ignores SIGTERM does once its context
// ended: it goes on until the kill grace has passed (SIGKILL) or its
// process dies.
func (j *job) outlastTerm() {
	if !j.sp.ignoreTerm {
		return
	}
	t := j.lf.clock(j.c).NewTimer(killGrace)
	defer t.Stop()
	select {
	case <-t.C():
	case <-j.lf.killed:
	}
}

const invSpec = "1d a scheduled run's tick is one of its schedule's ticks"

// checkTicks: invariant 1d. A run that is not manual runs a tick of its
// schedule's spec (in its zone, with its spread): of the plan's or, once
// reloaded, of either (a tick due at the reload may be the old spec's,
// caught up late). A DST change must neither invent a tick (the hour
// skipped in spring) nor repeat one (the hour repeated in autumn fires
// once, at its first occurrence, the spec's choice).
func (c *cluster) checkTicks(all []run) []violation {
	var vs []violation
	for _, r := range all {
		if r.manual {
			continue
		}
		sp := c.sched(r.sched)
		ok := false
		for _, seg := range c.segments(sp) {
			ok = ok || sp.spec(seg.cron).Next(r.tick.Add(-time.Nanosecond)).Equal(r.tick)
		}
		if !ok {
			vs = append(vs, violation{inv: invSpec, at: r.start, msg: fmt.Sprintf("%s is no tick of %q%s: %v",
				c.at(r.tick), sp.CronExpr, sp.workloadString(), r)})
		}
	}
	return vs
}

// drawTargets tags the nodes and targets some schedules (see above). A
// schedule with operator actions (reloads, triggers, backfills) is left
// untargeted: the checks of those follow every node.
func (p *plan) drawTargets(r *rand.Rand) {
	if r.IntN(3) != 0 {
		return
	}
	for i := range p.nodes {
		n := &p.nodes[i]
		n.tags = []string{"role=a"}
		if r.IntN(2) == 0 {
			n.tags[0] = "role=b"
		}
		if r.IntN(2) == 0 {
			n.tags = append(n.tags, "zone=1")
		}
	}
	acted := map[string]bool{}
	for _, op := range p.ops {
		acted[op.sched] = true
	}
	choices := [][]string{{"role=a"}, {"role=b"}, {"role=a", "zone=1"}}
	for i := range p.scheds {
		sp := &p.scheds[i]
		if acted[sp.ID] || r.IntN(3) != 0 {
			continue
		}
		sp.Nodes = choices[r.IntN(len(choices))]
	}
}

// nodeTags returns the tags of node id.
func (c *cluster) nodeTags(id string) []string {
	for _, n := range c.plan.nodes {
		if n.id == id {
			return n.tags
		}
	}
	return nil
}

const invTarget = "1t a targeted schedule runs only on a node with every tag it names"

// checkTargets: invariant 1t, for scheduled and manual runs alike.
func (c *cluster) checkTargets(all []run) []violation {
	var vs []violation
	for _, r := range all {
		sp := c.sched(r.sched)
		if tags := c.nodeTags(r.node); !scheduler.Matches(sp.Nodes, tags) {
			vs = append(vs, violation{inv: invTarget, at: r.start, msg: fmt.Sprintf("%v: %q targets %q, the node has %q",
				r, sp.ID, sp.Nodes, tags)})
		}
	}
	return vs
}

// drawGroups puts some schedules in a concurrency group (see above).
func (p *plan) drawGroups(r *rand.Rand) {
	if r.IntN(3) != 0 {
		return
	}
	acted := map[string]bool{}
	for _, op := range p.ops {
		acted[op.sched] = true
	}
	var members []int
	for i, sp := range p.scheds {
		if !acted[sp.ID] && sp.Location == nil {
			members = append(members, i)
		}
	}
	r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	members = members[:min(len(members), 2+r.IntN(3))]
	if len(members) < 2 {
		return
	}
	k := 1 + r.IntN(2)
	for _, i := range members {
		sp := &p.scheds[i]
		sp.Group, sp.GroupMax, sp.GroupWait = "g", k, r.IntN(2) == 0
	}
}

const invGroup = "1g a concurrency group never runs more than max_running runs at once"

// checkGroups: invariant 1g. At each run's start, the runs of its group
// still going (started before, not ended) number fewer than max_running,
// not counting one a freeze or a lost backend state excuses.
func (c *cluster) checkGroups(all []run) []violation {
	var vs []violation
	for i, r := range all { // in start order
		sp := c.sched(r.sched)
		if sp.Group == "" {
			continue
		}
		var going []run
		for _, a := range all[:i] {
			ap := c.sched(a.sched)
			if ap.Group != sp.Group || !(a.end.IsZero() || a.end.After(r.start)) {
				continue
			}
			if c.frozenOver(a, r.start) || c.plan.lostLocks(a.start.Add(-c.maxTTL()), r.start) {
				continue
			}
			going = append(going, a)
		}
		if len(going) >= sp.GroupMax {
			msg := fmt.Sprintf("group %q (max_running %d): %v started while %d ran:", sp.Group, sp.GroupMax, r, len(going))
			for _, a := range going {
				msg += fmt.Sprintf("\n    %v", a)
			}
			vs = append(vs, violation{inv: invGroup, at: r.start, msg: msg})
		}
	}
	return vs
}
