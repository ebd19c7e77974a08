package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
)

// Operators' actions beyond pause and resume: a reload that
// changes a schedule's timing on every node, a trigger (a manual run) and
// a backfill of one tick. They are drawn from a stream of their own, so
// that the rest of a seed's plan stays what it was before they were.
//
// The contract also names "stop" (stopping a running run): no such operator
// action exists in the code (no CLI command, no scheduler or ops entry
// point cancels one run), so there is nothing to simulate yet.

// opKind is an operator's action on one schedule.
type opKind uint8

const (
	opTrigger  opKind = iota + 1 // a manual run, now
	opBackfill                   // one tick run again (refused if undecided)
	opReload                     // the schedule's cron changes on every node
)

func (k opKind) String() string {
	switch k {
	case opTrigger:
		return "trigger"
	case opBackfill:
		return "backfill"
	case opReload:
		return "reload"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// opAction is one operator action, due at true time at.
type opAction struct {
	kind  opKind
	sched string
	at    time.Time
	// id is a trigger's or backfill's request id (its run id).
	id string
	// tick is a backfill's tick (one of the spec in force at at).
	tick time.Time
	// cron and period are a reload's new timing.
	cron   string
	period time.Duration
	// pick chooses, among the lives running at at, the one whose poll
	// takes a trigger or backfill first.
	pick float64
}

// cronFor is the cron expression of a schedule firing every period.
func cronFor(period time.Duration) string {
	if period < time.Minute {
		return fmt.Sprintf("*/%d * * * * *", int(period/time.Second))
	}
	return fmt.Sprintf("0 */%d * * * *", int(period/time.Minute))
}

// drawOps draws the operators' actions: a reload for a sixth of the
// schedules, a trigger for a third of the locked ones, a backfill for a
// quarter of them (a fifth of the backfills ask for a tick not decided
// yet, which the scheduler must refuse).
func (p *plan) drawOps(r *rand.Rand) {
	secs := int64(p.span / time.Second)
	at := func(lo, tail int64) time.Time {
		return p.start.Add(time.Duration(lo+r.Int64N(secs-lo-tail))*time.Second +
			time.Duration(r.IntN(1000))*time.Millisecond)
	}
	for _, sp := range p.scheds {
		if r.IntN(6) != 0 {
			continue
		}
		period := periods[r.IntN(6)] // 1s..15s: a change the span sees
		if period == sp.period {
			period = periods[(r.IntN(5)+1+indexOfPeriod(sp.period))%6]
		}
		p.ops = append(p.ops, opAction{kind: opReload, sched: sp.ID, at: at(20, 30), cron: cronFor(period), period: period})
	}
	for i, sp := range p.scheds {
		if !locked(sp.Schedule) {
			continue
		}
		if r.IntN(3) == 0 {
			p.ops = append(p.ops, opAction{kind: opTrigger, sched: sp.ID, at: at(10, 25),
				id: fmt.Sprintf("trigger-%d", i), pick: r.Float64()})
		}
		if r.IntN(4) == 0 {
			a := at(15, 25)
			cron, period := p.timing(sp.ID, a)
			spec, err := cronspec.Parse(cron, time.UTC)
			if err != nil {
				panic(fmt.Sprintf("sim: plan's spec %q: %v", cron, err))
			}
			tick := spec.Next(a.Add(-time.Duration(1+r.IntN(4)) * period)) // decided, most likely
			if r.IntN(5) == 0 {
				tick = spec.Next(a) // not decided yet: refused
			}
			p.ops = append(p.ops, opAction{kind: opBackfill, sched: sp.ID, at: a, tick: tick,
				id: fmt.Sprintf("backfill-%d", i), pick: r.Float64()})
		}
	}
}

func indexOfPeriod(d time.Duration) int {
	for i, x := range periods {
		if x == d {
			return i
		}
	}
	return 0
}

// timing is the cron expression and period of schedule id in force at t:
// its plan's, or a reload's at or before t.
func (p *plan) timing(id string, t time.Time) (cron string, period time.Duration) {
	for _, sp := range p.scheds {
		if sp.ID == id {
			cron, period = sp.CronExpr, sp.period
		}
	}
	for _, op := range p.ops {
		if op.kind == opReload && op.sched == id && !op.at.After(t) {
			cron, period = op.cron, op.period
		}
	}
	return cron, period
}

// reloadOf is the reload of schedule id, if it has one.
func (p *plan) reloadOf(id string) (opAction, bool) {
	for _, op := range p.ops {
		if op.kind == opReload && op.sched == id {
			return op, true
		}
	}
	return opAction{}, false
}

// opsString describes the operators' actions for plan.String.
func (p *plan) opsString() string {
	var b strings.Builder
	for _, op := range p.ops {
		fmt.Fprintf(&b, "  %s %s at +%v", op.kind, op.sched, op.at.Sub(p.start))
		switch op.kind {
		case opReload:
			fmt.Fprintf(&b, " to %q", op.cron)
		case opBackfill:
			fmt.Fprintf(&b, " tick +%v", op.tick.Sub(p.start))
		}
		b.WriteString("\n")
	}
	return b.String()
}
