package config

import (
	"slices"
	"strings"
	"testing"
)

// tags on the node and nodes on a schedule are read as written, from the
// main file and from an include.
func TestTagKeys(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "more.toml", `
[[scheduled]]
id = "inc"
cron = "@daily"
nodes = ["zone=a"]
command = ["x"]
`)
	c := mustLoad(t, write(t, dir, "b.toml", `
tags = ["role=db", "zone=a"]
include = ["more.toml"]

[[scheduled]]
id = "vacuum"
cron = "@daily"
nodes = ["role=db"]
command = ["x"]

[[scheduled]]
id = "everywhere"
cron = "@daily"
command = ["x"]
`))
	if !slices.Equal(c.Tags, []string{"role=db", "zone=a"}) {
		t.Errorf("tags = %q", c.Tags)
	}
	if got := schedule(t, c, "vacuum").Nodes; !slices.Equal(got, []string{"role=db"}) {
		t.Errorf("vacuum's nodes = %q", got)
	}
	if got := schedule(t, c, "inc").Nodes; !slices.Equal(got, []string{"zone=a"}) {
		t.Errorf("the included schedule's nodes = %q", got)
	}
	if got := schedule(t, c, "everywhere").Nodes; got != nil {
		t.Errorf("an untargeted schedule's nodes = %q, want nil", got)
	}
}

// A bad tag or nodes entry is reported naming the entry, at its line.
func TestTagKeyProblems(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		line           int
	}{
		{"empty tag", "tags = [\"role=db\", \"\"]\n" + job + "command = [\"x\"]\n", `tags[1]: a tag is empty`, 1},
		{"a list in one tag", "tags = [\"role=db, zone=a\"]\n" + job + "command = [\"x\"]\n", `tags[0]: tag "role=db, zone=a" holds a space or a comma`, 1},
		{"control character", "tags = [\"role=\\u0007\"]\n" + job + "command = [\"x\"]\n", `tags[0]: tag "role=\a" holds a control character`, 1},
		{"tags not a list", "tags = \"role=db\"\n" + job + "command = [\"x\"]\n", `tags`, 1},
		{"empty nodes", job + "command = [\"x\"]\nnodes = []\n", `schedule "j": nodes is empty: no node would run it`, 5},
		{"bad nodes entry", job + "command = [\"x\"]\nnodes = [\"role=db\", \"zone a\"]\n", `schedule "j": nodes[1]: tag "zone a" holds a space or a comma`, 5},
		{"long tag", job + "command = [\"x\"]\nnodes = [\"" + strings.Repeat("x", MaxTagLen+1) + "\"]\n", `is 129 bytes, more than 128`, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, tc.in, tc.want, tc.line)
		})
	}
}

// [groups.NAME] and a schedule's group: read, max_running copied onto
// the schedule; every mistake named at its line.
func TestGroupKeys(t *testing.T) {
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
[locking]
backend = "memory"
[groups.etl]
max_running = 2

[[scheduled]]
id = "load"
cron = "@daily"
group = "etl"
group_wait = true
command = ["x"]
`))
	s := schedule(t, c, "load")
	if s.Group != "etl" || s.GroupMax != 2 || !s.GroupWait {
		t.Errorf("group %q max %d wait %v", s.Group, s.GroupMax, s.GroupWait)
	}
	mem := "[locking]\nbackend = \"memory\"\n"
	for _, tc := range []struct {
		name, in, want string
		line           int
	}{
		{"undeclared", mem + job + "command = [\"x\"]\ngroup = \"etl\"\n", `schedule "j": group "etl" is not declared: add [groups.etl] with max_running`, 7},
		{"no max_running", mem + "[groups.etl]\n" + job + "command = [\"x\"]\ngroup = \"etl\"\n", `[groups.etl] max_running is 0; want 1 to 1000`, 3},
		{"too many", mem + "[groups.etl]\nmax_running = 1001\n", `[groups.etl] max_running is 1001`, 4},
		{"bad name", mem + "[groups.\"e t l\"]\nmax_running = 1\n", `group name "e t l": use letters, digits`, 3},
		{"no backend", "[groups.etl]\nmax_running = 1\n", `[groups.etl]: a group's count is kept in the lock backend`, 1},
		{"wait without group", mem + job + "command = [\"x\"]\ngroup_wait = true\n", `schedule "j": group_wait is set but the schedule has no group`, 7},
		{"slot prefix id", mem + "[[scheduled]]\nid = \"bext-group:x\"\ncron = \"@daily\"\ncommand = [\"x\"]\n", `begins with "bext-group:"`, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, tc.in, tc.want, tc.line)
		})
	}
}

// on_node_loss: skip (default) or rerun, which needs the schedule's own
// lock (a backend, a locked hint, not overlap = "allow"); ids may not
// take the re-run markers' prefix.
func TestOnNodeLossKey(t *testing.T) {
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
[locking]
backend = "memory"

[[scheduled]]
id = "billing"
cron = "@hourly"
hint = "require_global"
on_node_loss = "rerun"
overlap = "queue"
command = ["x"]

[[scheduled]]
id = "plain"
cron = "@hourly"
command = ["x"]
`))
	if got := schedule(t, c, "billing").OnNodeLoss; got != OnNodeLossRerun {
		t.Errorf("billing's on_node_loss = %q", got)
	}
	if got := schedule(t, c, "plain").OnNodeLoss; got != "" {
		t.Errorf("plain's on_node_loss = %q, want unset (skip)", got)
	}
	mem := "[locking]\nbackend = \"memory\"\n"
	for _, tc := range []struct {
		name, in, want string
		line           int
	}{
		{"unknown", mem + job + "command = [\"x\"]\non_node_loss = \"retry\"\n", `schedule "j": unknown on_node_loss "retry" (want skip or rerun)`, 7},
		{"node_local", mem + job + "command = [\"x\"]\nhint = \"node_local\"\non_node_loss = \"rerun\"\n", `on_node_loss = "rerun" needs a locked schedule`, 8},
		{"no backend", job + "command = [\"x\"]\non_node_loss = \"rerun\"\n", `on_node_loss = "rerun" needs a lock backend`, 5},
		{"overlap allow", mem + job + "command = [\"x\"]\noverlap = \"allow\"\non_node_loss = \"rerun\"\n", `use overlap skip, queue or replace, not allow`, 8},
		{"marker prefix id", mem + "[[scheduled]]\nid = \"bext-rerun:x\"\ncron = \"@daily\"\ncommand = [\"x\"]\n", `begins with "bext-rerun:"`, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, tc.in, tc.want, tc.line)
		})
	}
}
