package ops_test

import (
	"slices"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// A targeted schedule that no live node's tags match: status warns
// (no_node) and audit shows its undecided due ticks skipped, reason
// no_node; a node with the tags announcing lifts both. A tick a node
// decided (mark past it, a run recorded) keeps its fate.
func TestTargetedScheduleWithNoNode(t *testing.T) {
	f := newAuditFixture(t)
	f.now = f.m(0).Add(5 * time.Second) // the tick of this minute is within AuditGrace
	scheds := []scheduler.Schedule{
		{ID: "db", CronExpr: "* * * * *", Hint: hints.RequireGlobal, Nodes: []string{"role=db", "zone=a"}},
		{ID: "any", CronExpr: "* * * * *", Hint: hints.RequireGlobal, Group: "etl", GroupMax: 3},
		{ID: "local", CronExpr: "* * * * *", Hint: hints.NodeLocal, Nodes: []string{"role=db"}},
	}
	announce := func(id string, tags ...string) {
		t.Helper()
		if err := f.st.Announce(t.Context(), cluster.Node{NodeID: id, ConfigHash: "h", Tags: tags}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	announce("web-1", "role=web", "zone=a")
	announce("db-2", "role=db", "zone=b") // role=db, but the other zone
	f.runs(t, cluster.Run{Schedule: "db", Tick: f.m(-3), Node: "db-old", Result: "success", StartedAt: f.m(-3), Attempts: 1, RunID: "r3"})
	raiseMark(t, f.st, "db", f.m(-3))
	svc := f.service(scheds, 100)

	st, err := svc.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Schedules {
		want := s.ID == "db" // local targets role=db: db-2 has it
		if s.NoNode != want {
			t.Errorf("status: %s no_node %v, want %v", s.ID, s.NoNode, want)
		}
		if s.ID == "db" && !slices.Equal(s.Nodes, []string{"role=db", "zone=a"}) {
			t.Errorf("status: db's nodes %q", s.Nodes)
		}
		if s.ID == "any" && (s.Nodes != nil || s.Group != "etl" || s.MaxRunning != 3) {
			t.Errorf("status: any shows nodes %q, group %q of %d; want none, etl of 3", s.Nodes, s.Group, s.MaxRunning)
		}
	}
	for _, n := range st.Nodes {
		if n.NodeID == "db-2" && !slices.Equal(n.Tags, []string{"role=db", "zone=b"}) {
			t.Errorf("status: db-2's tags %q", n.Tags)
		}
	}

	rows, err := svc.Audit(t.Context(), "db", f.m(-4), f.m(0))
	if err != nil {
		t.Fatal(err)
	}
	got := byTick(rows)
	if r := got[f.m(-3)]; r.Fate != "ran" {
		t.Errorf("the tick a node ran reads %s %v", r.Fate, deref(r.Reason))
	}
	for _, k := range []int{-2, -1} {
		if r := got[f.m(k)]; r.Fate != "skipped" || deref(r.Reason) != "no_node" {
			t.Errorf("tick %d min: %s %v, want skipped no_node", k, r.Fate, deref(r.Reason))
		}
	}
	if r := got[f.m(0)]; r.Fate == "skipped" {
		t.Errorf("the tick of this minute (within the grace) reads %s %v", r.Fate, deref(r.Reason))
	}
	rows, err = svc.Audit(t.Context(), "any", f.m(-4), f.m(-1))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if deref(r.Reason) == "no_node" {
			t.Errorf("an untargeted schedule's tick reads no_node: %+v", r)
		}
	}

	// A node with both tags comes: no warning, and the undecided ticks are
	// pending again (someone could still ask), not excused.
	announce("db-1", "zone=a", "role=db")
	st, err = svc.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Schedules {
		if s.NoNode {
			t.Errorf("status: %s no_node with a matching node live", s.ID)
		}
	}
	rows, err = svc.Audit(t.Context(), "db", f.m(-4), f.m(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if deref(r.Reason) == "no_node" {
			t.Errorf("with db-1 live, tick %v reads no_node", r.Tick)
		}
	}
}
