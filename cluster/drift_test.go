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
	// None announces field hashes (nodes of an earlier version): the
	// definition differs, which field is not known.
	if got := d.String(); got != "a: 1 on n1, n2; 9 on n3 (definition differs) | c: absent on n1, n2; 3 on n3" {
		t.Errorf("String = %q", got)
	}
	// Hashes differ but no node said which schedule: drift without names.
	d = cluster.Drift([]cluster.Node{{NodeID: "n1", ConfigHash: "x"}, {NodeID: "n2", ConfigHash: "y"}})
	if !d.Drifted || len(d.Schedules) != 0 {
		t.Errorf("unnamed drift = %+v", d)
	}
}

// fields builds a Node.Fields value: each field's hash, in DriftFields'
// order (cron, zone, hint, timing, job, ticks).
func fields(cron, zone, hint, timing, job, ticks string) string {
	return cron + zone + hint + timing + job + ticks
}

// Drift names the fields that differ when every node that has the
// schedule announced its field hashes, and says "definition" when one did
// not (a node of the previous version, which announces the whole hash
// only).
func TestDriftNamesFields(t *testing.T) {
	t.Parallel()
	base := fields("c000", "z000", "h000", "t000", "j000", "k000")
	for _, tc := range []struct {
		name   string
		other  string // n3's fields for "a"; "" for none announced
		want   []string
		string string
	}{
		{"cron", fields("c111", "z000", "h000", "t000", "j000", "k111"), []string{"cron"}, "a: 1 on n1, n2; 9 on n3 (cron differs)"},
		{"job and timing", fields("c000", "z000", "h000", "t111", "j111", "k111"), []string{"timing", "job"},
			"a: 1 on n1, n2; 9 on n3 (timing, job differ)"},
		{"zone by name", fields("c000", "z111", "h000", "t000", "j000", "k111"), []string{"zone"}, ""},
		// Same cron, zone name and timing, other fire times: the zone's
		// rules (time-zone data) differ.
		{"zone by its rules", fields("c000", "z000", "h000", "t000", "j000", "k111"), []string{"zone"}, ""},
		{"zone data and hint", fields("c000", "z000", "h111", "t000", "j000", "k111"), []string{"zone", "hint"}, ""},
		{"previous version", "", []string{"definition"}, "a: 1 on n1, n2; 9 on n3 (definition differs)"},
		{"malformed", "c111", []string{"definition"}, ""},
		{"collision of the field hashes", base, []string{"definition"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := func(id, hash, f string) cluster.Node {
				nd := cluster.Node{NodeID: id, ConfigHash: hash, Schedules: map[string]string{"a": hash}}
				if f != "" {
					nd.Fields = map[string]string{"a": f}
				}
				return nd
			}
			d := cluster.Drift([]cluster.Node{n("n1", "1", base), n("n2", "1", base), n("n3", "9", tc.other)})
			if len(d.Schedules) != 1 || fmt.Sprint(d.Schedules[0].Fields) != fmt.Sprint(tc.want) {
				t.Fatalf("drift = %+v, want fields %v", d, tc.want)
			}
			if tc.string != "" && d.String() != tc.string {
				t.Errorf("String = %q, want %q", d.String(), tc.string)
			}
		})
	}
	// Only absent on some nodes: no field differs.
	d := cluster.Drift([]cluster.Node{
		{NodeID: "n1", ConfigHash: "x", Schedules: map[string]string{"a": "1"}, Fields: map[string]string{"a": base}},
		{NodeID: "n2", ConfigHash: "y", Schedules: map[string]string{}},
	})
	if len(d.Schedules) != 1 || d.Schedules[0].Fields == nil || len(d.Schedules[0].Fields) != 0 || d.String() != "a: 1 on n1; absent on n2" {
		t.Errorf("absent only: %+v %q", d, d.String())
	}
}
