package cluster_test

import (
	"fmt"
	"testing"

	"github.com/bext-dev/bext-scheduler/cluster"
)

func TestDrift(t *testing.T) {
	same := map[string]string{"a": "1", "b": "2"}
	node := func(id string, h map[string]string) cluster.Node {
		return cluster.Node{NodeID: id, ConfigHash: fmt.Sprint(h), Schedules: h} // equal exactly when the maps are
	}
	if d := cluster.Drift([]cluster.Node{node("n1", same), node("n2", same)}); d.Drifted || len(d.Schedules) != 0 || d.String() != "" {
		t.Errorf("agreeing nodes: %+v", d)
	}
	if d := cluster.Drift(nil); d.Drifted || d.Schedules == nil {
		t.Errorf("no nodes: %+v", d)
	}
	d := cluster.Drift([]cluster.Node{node("n2", same), node("n1", same), node("n3", map[string]string{"a": "9", "b": "2", "c": "3"})})
	if !d.Drifted || len(d.Schedules) != 2 || d.Schedules[0].ID != "a" || d.Schedules[1].ID != "c" {
		t.Fatalf("drift = %+v, want a and c", d)
	}
	if got := d.String(); got != "a: 1 on n1, n2; 9 on n3 | c: absent on n1, n2; 3 on n3" {
		t.Errorf("String = %q", got)
	}
	// Hashes differ but no node said which schedule: drift without names.
	d = cluster.Drift([]cluster.Node{{NodeID: "n1", ConfigHash: "x"}, {NodeID: "n2", ConfigHash: "y"}})
	if !d.Drifted || len(d.Schedules) != 0 {
		t.Errorf("unnamed drift = %+v", d)
	}
}
