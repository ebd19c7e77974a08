package deploy_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeMetricsTable: README's metrics table lists every bext_ metric
// a node exports and no other, each with its labels and, for the labels
// whose values are fixed words (reason, result, kind, op), every value
// it takes: the table is what dashboards and alerts are written from.
func TestReadmeMetricsTable(t *testing.T) {
	t.Parallel()
	readme := readRepoFile(t, "README.md")
	start := strings.Index(readme, "| name | type | labels |")
	if start < 0 {
		t.Fatal("README.md has no metrics table (| name | type | labels |)")
	}
	rows := map[string]string{} // metric → its labels column
	nameRE := regexp.MustCompile("^\\| `(bext_[a-z_]+)` \\|")
	for _, line := range strings.Split(readme[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		m := nameRE.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("README metrics table: row %q does not start with a bext_ metric name", line)
			continue
		}
		cols := strings.Split(strings.ReplaceAll(line, `\|`, "/"), "|")
		rows[m[1]] = cols[len(cols)-2]
	}
	exportedNames := map[string]bool{}
	for _, f := range gather(t) {
		name := f.GetName()
		if !strings.HasPrefix(name, "bext_") {
			continue // the Go and process collectors
		}
		exportedNames[name] = true
		labels, ok := rows[name]
		if !ok {
			t.Errorf("README's metrics table does not list %s", name)
			continue
		}
		values := map[string][]string{}
		for _, mt := range f.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if !slices.Contains(values[lp.GetName()], lp.GetValue()) {
					values[lp.GetName()] = append(values[lp.GetName()], lp.GetValue())
				}
			}
		}
		for label, vs := range values {
			if !regexp.MustCompile(`\b` + label + `\b`).MatchString(labels) {
				t.Errorf("README: %s's labels %q do not name %s", name, labels, label)
			}
			if !slices.Contains([]string{"reason", "result", "kind", "op"}, label) {
				continue
			}
			for _, v := range vs {
				if !regexp.MustCompile(`\b` + v + `\b`).MatchString(labels) {
					t.Errorf("README: %s's %s lacks the value %s (labels column: %q)", name, label, v, labels)
				}
			}
		}
	}
	for name := range rows {
		if !exportedNames[name] {
			t.Errorf("README's metrics table lists %s, which no node exports", name)
		}
	}
}
