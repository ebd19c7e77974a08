package cluster

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Config drift: the live nodes announce (Node.ConfigHash, Node.Schedules)
// a hash of each schedule's effective definition and one of them all;
// nodes that disagree run different schedules. The hashes are computed
// where the schedules are (internal/ops ScheduleHashes); comparing them is
// a reading of the cluster state, here, the same for the CLI, the API,
// the page and the agent's log line.

// ConfigDrift says whether the live nodes run different schedules, and
// which: for each schedule that differs, the nodes on each side.
type ConfigDrift struct {
	// Drifted is true when the live nodes announce more than one config
	// hash.
	Drifted   bool            `json:"drifted"`
	Schedules []ScheduleDrift `json:"schedules"` // sorted by id; [] when none
}

// ScheduleDrift is one schedule defined differently across nodes.
type ScheduleDrift struct {
	ID    string      `json:"id"`
	Sides []DriftSide `json:"sides"` // the most nodes first
	// Fields names what differs between the nodes that have the schedule:
	// FieldCron, FieldZone, FieldHint, FieldTiming, FieldJob, or
	// FieldDefinition when a side cannot say (a node of an earlier version,
	// or one that has not announced its field hashes yet: it does within
	// one announce period of seeing the drift). [] when the only
	// difference is nodes that lack the schedule.
	Fields []string `json:"fields"`
}

// The fields drift names (ScheduleDrift.Fields, a contract).
const (
	FieldCron   = "cron"   // the cron expression, and its calendar (except, start, end)
	FieldZone   = "zone"   // the time zone, by name or by its rules (time-zone data)
	FieldHint   = "hint"   // the placement hint, and the nodes a schedule targets
	FieldTiming = "timing" // overlap, expected_runtime, jitter, timeout, catchup_window, spread, retries, retry_backoff, pause_after_failures
	FieldJob    = "job"    // what the job runs (argv, or method and URL host)
	// FieldDefinition: the definitions differ, and a side does not say in
	// which field.
	FieldDefinition = "definition"
)

// fieldTicks is the sampled fire times: they differ with the cron, the
// zone or the spread, and alone when the zone's rules (time-zone data)
// differ under the same name.
const fieldTicks = "ticks"

// DriftFields are the fields whose hashes a Node.Fields value holds, in
// order, FieldHashLen hex digits each.
// An array, so that its length is a constant.
var DriftFields = [...]string{FieldCron, FieldZone, FieldHint, FieldTiming, FieldJob, fieldTicks}

// FieldHashLen is how many hex digits each field's hash keeps: a field
// that differs reads equal once in 65,536, and is then not named (the
// definition still differs).
const FieldHashLen = 4

// DriftSide is the nodes that share one definition of a schedule.
type DriftSide struct {
	// Hash is the definition's hash; "" on the nodes that do not have the
	// schedule at all.
	Hash  string   `json:"hash"`
	Nodes []string `json:"nodes"` // sorted
}

// Drift compares the live nodes' announcements. Nodes whose config hashes
// agree never drift; when they differ, every schedule whose hash differs
// between two nodes (or that some nodes lack) is named, with its sides.
func Drift(nodes []Node) ConfigDrift {
	d := ConfigDrift{Schedules: []ScheduleDrift{}}
	hashes := map[string]bool{}
	for _, n := range nodes {
		hashes[n.ConfigHash] = true
	}
	if len(hashes) < 2 {
		return d
	}
	d.Drifted = true
	ids := map[string]bool{}
	for _, n := range nodes {
		for id := range n.Schedules {
			ids[id] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		byHash := map[string][]string{}
		for _, n := range nodes {
			h := n.Schedules[id] // "" when the node lacks it
			byHash[h] = append(byHash[h], n.NodeID)
		}
		if len(byHash) < 2 {
			continue
		}
		sd := ScheduleDrift{ID: id}
		for h, ns := range byHash {
			slices.Sort(ns)
			sd.Sides = append(sd.Sides, DriftSide{Hash: h, Nodes: ns})
		}
		sd.Fields = []string{} // only absent on some nodes
		defined := len(byHash)
		if _, absent := byHash[""]; absent {
			defined--
		}
		if defined > 1 {
			sd.Fields = driftedFields(id, nodes)
		}
		sort.Slice(sd.Sides, func(i, j int) bool {
			a, b := sd.Sides[i], sd.Sides[j]
			if len(a.Nodes) != len(b.Nodes) {
				return len(a.Nodes) > len(b.Nodes)
			}
			return a.Nodes[0] < b.Nodes[0]
		})
		d.Schedules = append(d.Schedules, sd)
	}
	return d
}

// driftedFields names the fields of schedule id that differ between the
// nodes that have it (see ScheduleDrift.Fields).
func driftedFields(id string, nodes []Node) []string {
	var values []string // the field hashes of each node that has id
	unknown := false
	for _, n := range nodes {
		if n.Schedules[id] == "" {
			continue
		}
		f := n.Fields[id]
		if len(f) != len(DriftFields)*FieldHashLen {
			unknown = true
			continue
		}
		values = append(values, f)
	}
	if unknown {
		return []string{FieldDefinition}
	}
	var out []string
	differs := func(i int) bool {
		for _, v := range values[1:] {
			if v[i*FieldHashLen:(i+1)*FieldHashLen] != values[0][i*FieldHashLen:(i+1)*FieldHashLen] {
				return true
			}
		}
		return false
	}
	ticksOnly := true
	for i, name := range DriftFields {
		if name == fieldTicks || !differs(i) {
			continue
		}
		out = append(out, name)
		if name == FieldCron || name == FieldZone || name == FieldTiming {
			ticksOnly = false // these move the ticks themselves
		}
	}
	if ticksOnly && differs(slices.Index(DriftFields[:], fieldTicks)) {
		// Same cron, zone name and spread, other fire times: the zone's
		// rules differ (a node's time-zone data is older).
		out = append(out, FieldZone)
		slices.SortFunc(out, func(a, b string) int {
			return slices.Index(DriftFields[:], a) - slices.Index(DriftFields[:], b)
		})
	}
	if len(out) == 0 {
		return []string{FieldDefinition} // hashes of 16 bits alike; the whole hashes are not
	}
	return out
}

// What words a schedule drift's fields: "cron, job differ", "definition
// differs", or "" when the nodes that have it agree.
func (s ScheduleDrift) What() string {
	switch len(s.Fields) {
	case 0:
		return ""
	case 1:
		return s.Fields[0] + " differs"
	}
	return strings.Join(s.Fields, ", ") + " differ"
}

// String words the drift for a log line or a table: "" when none.
func (d ConfigDrift) String() string {
	if !d.Drifted {
		return ""
	}
	if len(d.Schedules) == 0 {
		return "the live nodes announce different config hashes"
	}
	parts := make([]string, 0, len(d.Schedules))
	for _, s := range d.Schedules {
		sides := make([]string, 0, len(s.Sides))
		for _, side := range s.Sides {
			what := "absent"
			if side.Hash != "" {
				what = side.Hash
			}
			sides = append(sides, fmt.Sprintf("%s on %s", what, strings.Join(side.Nodes, ", ")))
		}
		what := ""
		if w := s.What(); w != "" {
			what = " (" + w + ")"
		}
		parts = append(parts, fmt.Sprintf("%s: %s%s", s.ID, strings.Join(sides, "; "), what))
	}
	return strings.Join(parts, " | ")
}
