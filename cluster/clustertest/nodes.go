package clustertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
)

// node builds an announcement with every field set.
func node(id string, schedules map[string]string) cluster.Node {
	return cluster.Node{
		NodeID:     id,
		Version:    "v1.2.3-" + id,
		StartedAt:  base.Add(-time.Hour),
		ConfigHash: "hash-of-" + id,
		Schedules:  schedules,
	}
}

// wantNodes fails unless the live nodes are want (by id, in order), each
// with its announced fields and Schedules; it returns them.
func (s *suite) wantNodes(st cluster.Store, want []cluster.Node, what string) []cluster.Node {
	s.t.Helper()
	got, err := st.Nodes(s.ctx)
	s.check(err, what+": Nodes")
	if len(got) != len(want) {
		s.t.Fatalf("%s: Nodes = %v, want %v", what, nodeIDs(got), nodeIDs(want))
	}
	for i, w := range want {
		g := got[i]
		switch {
		case g.NodeID != w.NodeID:
			s.t.Fatalf("%s: Nodes = %v, want %v (sorted by node id)", what, nodeIDs(got), nodeIDs(want))
		case g.Version != w.Version || g.ConfigHash != w.ConfigHash || !g.StartedAt.Equal(w.StartedAt):
			s.t.Fatalf("%s: node %q = version %q, config hash %q, started %v; want %q, %q, %v",
				what, w.NodeID, g.Version, g.ConfigHash, g.StartedAt, w.Version, w.ConfigHash, w.StartedAt)
		case len(g.Schedules) != len(w.Schedules) || !maps.Equal(g.Schedules, w.Schedules):
			s.t.Fatalf("%s: node %q schedules = %v, want %v", what, w.NodeID, g.Schedules, w.Schedules)
		case len(g.Fields) != len(w.Fields) || !maps.Equal(g.Fields, w.Fields):
			s.t.Fatalf("%s: node %q field hashes = %v, want %v", what, w.NodeID, g.Fields, w.Fields)
		}
	}
	return got
}

func nodeIDs(ns []cluster.Node) []string {
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i] = n.NodeID
	}
	return ids
}

// wantSeen fails unless LastSeen is the store's clock at the announcement:
// within [before, after] (the clock read around it), with a tolerance for a
// server's clock when the store has no injected one.
func (s *suite) wantSeen(n cluster.Node, before, after time.Time, what string) {
	s.t.Helper()
	tol := time.Duration(0)
	if s.b.Advance == nil {
		tol = time.Second
	}
	if n.LastSeen.Before(before.Add(-tol)) || n.LastSeen.After(after.Add(tol)) {
		s.t.Fatalf("%s: node %q last seen %v, want the store's clock at its announcement, between %v and %v",
			what, n.NodeID, n.LastSeen, before, after)
	}
}

// Nodes are listed sorted by id, with their fields, schedule hashes and
// field hashes;
// a new announcement replaces the old one (LastSeen moves, a schedule the
// node dropped is gone).
func caseNodes(s *suite) {
	a, b, c := s.store(), s.store(), s.store()
	na := node("node-b", map[string]string{"backup": "h1", "report": "h2", "sync/ü": "h3"})
	nb := node("node-a", map[string]string{"backup": "h1"})
	nc := node("node-c", nil)
	before := s.now()
	s.check(a.Announce(s.ctx, na, longTTL), "Announce(node-b)")
	s.check(b.Announce(s.ctx, nb, longTTL), "Announce(node-a)")
	s.check(c.Announce(s.ctx, nc, longTTL), "Announce(node-c)")
	after := s.now()
	got := s.wantNodes(a, []cluster.Node{nb, na, nc}, "three nodes")
	for _, n := range got {
		s.wantSeen(n, before, after, "first announcement")
	}

	if s.b.Advance != nil {
		s.passTime(2 * time.Second)
	} else {
		s.passTime(20 * time.Millisecond) // enough for LastSeen to move
	}
	na.Schedules = map[string]string{"backup": "h1-changed", "report": "h2"}
	na.ConfigHash = "new-hash"
	// Seeing backup in drift, it announces backup's field hashes; a node
	// of an earlier version (node-a, node-c) announces none.
	na.Fields = map[string]string{"backup": "0a1b2c3d4e5f6a7b8c9d0e1f"}
	before = s.now()
	s.check(a.Announce(s.ctx, na, longTTL), "Announce(node-b) again")
	after = s.now()
	got = s.wantNodes(c, []cluster.Node{nb, na, nc}, "after node-b announced again")
	s.wantSeen(got[1], before, after, "second announcement")
	if !got[1].LastSeen.After(got[0].LastSeen) {
		s.t.Fatalf("node-b last seen %v after announcing again, want after node-a's %v", got[1].LastSeen, got[0].LastSeen)
	}

	// The JSON of a node is the contract's, schedules not included.
	j, err := json.Marshal(got[0])
	s.check(err, "json.Marshal(node)")
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	s.check(dec.Decode(&m), "decoding the node's JSON")
	keys := slices.Sorted(maps.Keys(m))
	if want := []string{"config_hash", "last_seen", "node_id", "started_at", "version"}; !slices.Equal(keys, want) {
		s.t.Fatalf("node JSON has fields %v, want exactly %v: %s", keys, want, j)
	}
}

// A node that stops announcing drops out after its TTL; one that goes on
// stays.
func caseNodeExpiry(s *suite) {
	a, b := s.store(), s.store()
	ttl := nodeTTL
	if s.b.Advance != nil {
		ttl = 10 * time.Second
	}
	short, long := node("node-short", map[string]string{"j": "h"}), node("node-long", nil)
	s.check(a.Announce(s.ctx, short, ttl), "Announce(node-short)")
	s.check(b.Announce(s.ctx, long, 100*ttl), "Announce(node-long)")
	s.wantNodes(b, []cluster.Node{long, short}, "both announced")

	if s.b.Advance != nil {
		// Just before the TTL ends the node is still there.
		s.passTime(ttl - time.Millisecond)
		s.wantNodes(b, []cluster.Node{long, short}, "just before node-short's TTL ends")
		s.passTime(2 * time.Millisecond)
	} else {
		s.passTime(ttl + realSlack)
	}
	s.wantNodes(a, []cluster.Node{long}, "after node-short's TTL")

	// Announcing again brings it back.
	s.check(a.Announce(s.ctx, short, ttl), "Announce(node-short) again")
	s.wantNodes(b, []cluster.Node{long, short}, "node-short announced again")
}

// Leave removes a node at once; leaving twice, or an unknown node, is fine.
func caseLeave(s *suite) {
	a, b := s.store(), s.store()
	na, nb := node("node-a", nil), node("node-b", map[string]string{"x": "1"})
	s.check(a.Announce(s.ctx, na, longTTL), "Announce(node-a)")
	s.check(b.Announce(s.ctx, nb, longTTL), "Announce(node-b)")
	s.check(a.Leave(s.ctx, "node-a"), "Leave(node-a)")
	s.wantNodes(b, []cluster.Node{nb}, "after node-a left")
	s.check(a.Leave(s.ctx, "node-a"), "Leave(node-a) twice")
	s.check(a.Leave(s.ctx, "never-was"), "Leave of an unknown node")
	s.wantNodes(a, []cluster.Node{nb}, "after the no-op leaves")
	for i := range 5 {
		s.check(a.Announce(s.ctx, node(fmt.Sprint("n", i), nil), longTTL), "Announce")
	}
	got, err := a.Nodes(s.ctx)
	s.check(err, "Nodes")
	if !slices.IsSortedFunc(got, func(x, y cluster.Node) int { return strings.Compare(x.NodeID, y.NodeID) }) || len(got) != 6 {
		s.t.Fatalf("Nodes = %v, want 6 nodes sorted by id", nodeIDs(got))
	}
}

// A node's readiness, clock offset, tags and running runs come back as
// announced (times to the microsecond at least), and a later announcement
// without them clears them: `status` shows what runs now from these.
func caseNodeState(s *suite) {
	st := s.store()
	off := -1500 * time.Millisecond
	n := node("node-r", map[string]string{"backup": "h1"})
	n.Ready, n.ClockOffset = true, &off
	n.Tags = []string{"role=db", "zone=eu-1", "ü"}
	n.Running = []cluster.Running{
		{Schedule: "backup", Tick: base, RunID: "r1", StartedAt: base.Add(1234 * time.Microsecond), Attempt: 1},
		{Schedule: "sync/ü", Tick: base.Add(time.Minute), RunID: "r2", StartedAt: base.Add(time.Minute + time.Second), Attempt: 3},
	}
	s.check(st.Announce(s.ctx, n, longTTL), "Announce(running)")
	got := s.wantNodes(st, []cluster.Node{n}, "a node with runs")[0]
	if !got.Ready || got.ClockOffset == nil || *got.ClockOffset != off {
		s.t.Fatalf("node ready %v, clock offset %v; want true, %v", got.Ready, got.ClockOffset, off)
	}
	if !slices.Equal(got.Tags, n.Tags) {
		s.t.Fatalf("node tags %q, want %q in order", got.Tags, n.Tags)
	}
	if len(got.Running) != len(n.Running) {
		s.t.Fatalf("node running %+v, want %+v", got.Running, n.Running)
	}
	for i, w := range n.Running {
		g := got.Running[i]
		if g.Schedule != w.Schedule || g.RunID != w.RunID || g.Attempt != w.Attempt || !g.Tick.Equal(w.Tick) || !g.StartedAt.Equal(w.StartedAt) {
			s.t.Fatalf("node running[%d] = %+v, want %+v", i, g, w)
		}
	}
	n.Ready, n.ClockOffset, n.Running, n.Tags = false, nil, nil, nil
	s.check(st.Announce(s.ctx, n, longTTL), "Announce(idle)")
	got = s.wantNodes(st, []cluster.Node{n}, "the node idle")[0]
	if got.Ready || got.ClockOffset != nil || len(got.Running) != 0 || len(got.Tags) != 0 {
		s.t.Fatalf("node announced idle reads ready %v, clock offset %v, running %+v, tags %q; want false, nil, none, none",
			got.Ready, got.ClockOffset, got.Running, got.Tags)
	}
}
