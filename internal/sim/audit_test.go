package sim

import (
	"context"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// markedBackend is a backend whose only answer is s0's final mark.
type markedBackend struct {
	backend
	mark time.Time
}

func (m markedBackend) Mark(context.Context, string) (time.Time, bool, error) {
	return m.mark, !m.mark.IsZero(), nil
}

var _ locking.MarkReader = markedBackend{}

// audited is handMade's cluster with s0's mark at tick mark (seconds from
// t0), set first by InitMarks at t0, and a skip record of every tick up to
// it but those in gone (no grant: only invariant 8 speaks of them).
func audited(mark int, gone ...int) *cluster {
	c := handMade(scheduler.OverlapSkip)
	c.mem = markedBackend{mark: t0.Add(time.Duration(mark) * time.Second)}
	c.verdicts.init = map[string]time.Time{"s0": t0}
	for tick := 2; tick <= mark; tick += 2 {
		skip := true
		for _, g := range gone {
			skip = skip && g != tick
		}
		if skip {
			c.skipRecs = append(c.skipRecs, skipRec{SkipRecord: scheduler.SkipRecord{Schedule: "s0",
				Tick: t0.Add(time.Duration(tick) * time.Second), Node: "node-0", Reason: scheduler.RecordPaused}})
		}
	}
	return c
}

func sec(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Second))) }

func TestCheckAuditFindsALostTick(t *testing.T) {
	if vs := audited(20).checkAudit(); len(vs) != 0 {
		t.Fatalf("violations with every tick recorded: %+v", vs)
	}
	vs := audited(20, 10).checkAudit()
	if len(vs) != 1 || vs[0].inv != invAudit || !vs[0].at.Equal(sec(10)) || vs[0].known != "" {
		t.Fatalf("violations %+v, want one of %q at +10s, of no known hole", vs, invAudit)
	}
	// A start record, or a run record, counts as a skip record does.
	c := audited(20, 10)
	c.starts = append(c.starts, startRec{RunStart: scheduler.RunStart{Schedule: "s0", Tick: sec(10), Node: "node-0"}})
	if vs := c.checkAudit(); len(vs) != 0 {
		t.Fatalf("violations with tick +10s started: %+v", vs)
	}
	// Past the mark a tick is undecided, not lost; granted, invariant 2's.
	if vs := audited(8, 10, 12).checkAudit(); len(vs) != 0 {
		t.Fatalf("violations past the mark: %+v", vs)
	}
	c = audited(20, 10)
	c.grants.add(grant{node: "node-0", key: "s0", tick: sec(10), token: "t"})
	if vs := c.checkAudit(); len(vs) != 0 {
		t.Fatalf("violations for a granted tick: %+v", vs)
	}
}

// A tick whose paused verdict's reply the link lost is the known hole;
// one whose node heard it is not.
func TestCheckAuditPausedReplyLost(t *testing.T) {
	for _, delivered := range []bool{false, true} {
		c := audited(20, 10)
		c.verdicts.vs = append(c.verdicts.vs, verdict{node: "node-0", key: "s0", tick: sec(10), v: locking.TickPaused,
			mark: sec(10), before: sec(8), at: sec(10), delivered: delivered})
		vs := c.checkAudit()
		want := ""
		if !delivered {
			want = holePausedReplyLost
		}
		if len(vs) != 1 || vs[0].known != want {
			t.Errorf("delivered %v: violations %+v, want one of known hole %q", delivered, vs, want)
		}
	}
	// Its reply lost, but a resend's answer from the verdict record heard
	// (it carries the verdict and the step's Before): no known hole, the
	// node should have recorded T.
	c := audited(20, 10)
	c.verdicts.vs = append(c.verdicts.vs,
		verdict{node: "node-0", key: "s0", tick: sec(10), v: locking.TickPaused, mark: sec(10), before: sec(8), at: sec(10)},
		verdict{node: "node-0", key: "s0", tick: sec(10), v: locking.TickPaused, mark: sec(10), before: sec(8), at: sec(11), delivered: true})
	if vs := c.checkAudit(); len(vs) != 1 || vs[0].known != "" {
		t.Errorf("a resend's answer heard: violations %+v, want one of no known hole", vs)
	}
}

// A tick a grant's step passed the mark over, its reply lost, is the known
// hole only while no answer to a resend of it was heard: answered from the
// grant's record, that answer carries the step's Before.
func TestCheckAuditGrantGapReplyLost(t *testing.T) {
	for _, heard := range []bool{false, true} {
		c := audited(20, 10)
		c.verdicts.vs = append(c.verdicts.vs,
			verdict{node: "node-0", key: "s0", tick: sec(12), v: locking.TickGranted, mark: sec(12), before: sec(8), at: sec(12), token: "t"})
		if heard {
			c.verdicts.vs = append(c.verdicts.vs, verdict{node: "node-0", key: "s0", tick: sec(12), v: locking.TickGranted,
				mark: sec(12), before: sec(8), at: sec(13), token: "t", delivered: true, again: true})
		}
		c.grants.add(grant{node: "node-0", key: "s0", tick: sec(12), token: "t"})
		want := holeGrantGapReplyLost
		if heard {
			want = ""
		}
		if vs := c.checkAudit(); len(vs) != 1 || !vs[0].at.Equal(sec(10)) || vs[0].known != want {
			t.Errorf("resend heard %v: violations %+v, want one at +10s of known hole %q", heard, vs, want)
		}
	}
}

// A loss of the marks excuses the ticks after the highest one decided
// before it, up to where the first step after it found the mark (a
// resend answered from its grant's record is none); not those after.
func TestCheckAuditLossOfMarks(t *testing.T) {
	c := audited(20, 10, 12, 16)
	c.plan.losses = []stateLoss{{kind: lossRestart, at: sec(9.5)}}
	c.verdicts.vs = []verdict{
		{node: "node-0", key: "s0", tick: sec(8), v: locking.TickGranted, mark: sec(8), before: sec(6), at: sec(8), delivered: true},
		// A resend answered from its grant's record after the loss: no step.
		{node: "node-0", key: "s0", tick: sec(6), v: locking.TickGranted, mark: sec(6), at: sec(11), delivered: true, again: true},
		{node: "node-0", key: "s0", tick: sec(14), v: locking.TickGranted, mark: sec(14), at: sec(14), delivered: true},
		{node: "node-0", key: "s0", tick: sec(18), v: locking.TickGranted, mark: sec(18), before: sec(14), at: sec(18), delivered: true},
	}
	vs := c.checkAudit()
	if len(vs) != 1 || !vs[0].at.Equal(sec(16)) {
		t.Fatalf("violations %+v, want one, at +16s", vs)
	}
}
