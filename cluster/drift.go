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
}

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
		parts = append(parts, fmt.Sprintf("%s: %s", s.ID, strings.Join(sides, "; ")))
	}
	return strings.Join(parts, " | ")
}
