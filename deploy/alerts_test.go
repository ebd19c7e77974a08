package deploy_test

import (
	"context"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/metrics"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// series is what the service exports: metric name → its label names.
type series map[string][]string

// exported gathers a real registry: every metric, with the labels it has,
// and the values each label takes (schedule and backend aside, those are
// the contract's fixed words).
func exported(t *testing.T) (series, map[string][]string) {
	t.Helper()
	fams := gather(t)
	out := series{"up": {"job", "instance"}}
	values := map[string][]string{}
	for _, f := range fams {
		var labels []string
		for _, mt := range f.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if !slices.Contains(labels, lp.GetName()) {
					labels = append(labels, lp.GetName())
				}
				if !slices.Contains(values[lp.GetName()], lp.GetValue()) {
					values[lp.GetName()] = append(values[lp.GetName()], lp.GetValue())
				}
			}
		}
		name := f.GetName()
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[name+"_bucket"] = append(slices.Clone(labels), "le")
			out[name+"_sum"] = labels
			out[name+"_count"] = labels
		case dto.MetricType_SUMMARY:
			out[name] = append(slices.Clone(labels), "quantile")
			out[name+"_sum"] = labels
			out[name+"_count"] = labels
		default:
			out[name] = labels
		}
	}
	return out, values
}

// gather is every metric family a node exports, each series there:
// a schedule that ran and lost a tick, and an instrumented backend that
// has try-lock-tick.
func gather(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{Version: "v", Commit: "c", GoVersion: "go"})
	m.AddSchedule("s")
	m.NextTick("s", time.Now().Add(time.Minute))
	// The last-success gauge is absent until a success: record one.
	m.RunRecorded(scheduler.RunRecord{Schedule: "s", Result: scheduler.ResultSuccess, Start: time.Now(), Attempts: 1})
	// So is the lost-ticks gauge, until an audit finds one.
	m.SetLostTicks(map[string]int{"s": 1})
	l := metrics.InstrumentLocker(memory.New(), "memory", m)
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

var (
	groupingRE   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	rangeRE      = regexp.MustCompile(`\[[^\]]*\]`)
	selectorRE   = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?`)
	matcherRE    = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without",
		"on", "ignoring", "group_left", "group_right"}
	// Labels Prometheus attaches at scrape time, present on every series.
	targetLabels = []string{"job", "instance"}
)

// checkExpr returns every problem with the metric selectors in a PromQL
// expression: unknown metric names, label names the metric does not have,
// and values for fixed-word labels (reason, result, op) that it never takes.
// It also returns the labels the expression's grouping clauses keep.
func checkExpr(expr string, known series, values map[string][]string) (problems []string, kept []string) {
	for _, g := range groupingRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				kept = append(kept, l)
			}
		}
	}
	e := groupingRE.ReplaceAllString(expr, " ")
	e = rangeRE.ReplaceAllString(e, " ")
	for _, loc := range selectorRE.FindAllStringSubmatchIndex(e, -1) {
		name := e[loc[2]:loc[3]]
		if loc[2] > 0 && strings.ContainsAny(e[loc[2]-1:loc[2]], "0123456789.\"") {
			continue // part of a number (1e3) or inside a string
		}
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if loc[4] < 0 && strings.HasPrefix(rest, "(") {
			continue // a function call
		}
		if slices.Contains(promKeywords, strings.ToLower(name)) {
			continue
		}
		labels, ok := known[name]
		if !ok {
			problems = append(problems, "unknown metric "+name)
			continue
		}
		if loc[4] < 0 {
			continue
		}
		for _, m := range matcherRE.FindAllStringSubmatch(e[loc[4]:loc[5]], -1) {
			label, op, val := m[1], m[2], m[3]
			if !slices.Contains(labels, label) && !slices.Contains(targetLabels, label) {
				problems = append(problems, name+" has no label "+label)
				continue
			}
			if op == "!=" || op == "!~" || !slices.Contains([]string{"reason", "result", "op", "kind"}, label) {
				continue
			}
			for _, v := range strings.Split(val, "|") {
				if !slices.Contains(values[label], v) {
					problems = append(problems, name+": "+label+"=\""+v+"\" is never exported")
				}
			}
		}
	}
	return problems, kept
}

func TestExprCheckerCatchesMistakes(t *testing.T) {
	known, values := exported(t)
	for expr, want := range map[string]string{
		`rate(bext_scheduler_tick_total[5m]) > 0`:                                   "unknown metric bext_scheduler_tick_total",
		`sum by (schedule) (increase(bext_scheduler_runs_total{reson="x"}[5m]))`:    "has no label reson",
		`increase(bext_scheduler_ticks_skipped_total{reason="contention"}[5m]) > 1`: `reason="contention" is never exported`,
		`bext_scheduler_runs_total{result=~"failure|timedout"}`:                     `result="timedout" is never exported`,
		`histogram_quantile(0.99, rate(bext_scheduler_run_duration_seconds[5m]))`:   "unknown metric bext_scheduler_run_duration_seconds",
	} {
		problems, _ := checkExpr(expr, known, values)
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("checkExpr(%s) = %q, want a problem containing %q", expr, problems, want)
		}
	}
	for _, ok := range []string{
		`up{job="bext-scheduler"} == 0`,
		`histogram_quantile(0.99, sum by (le) (rate(bext_scheduler_run_duration_seconds_bucket[5m]))) > 1e3`,
		`sum(bext_locking_held_locks{backend="memory"}) or absent(up)`,
	} {
		if problems, _ := checkExpr(ok, known, values); len(problems) > 0 {
			t.Errorf("checkExpr(%s) = %q, want none", ok, problems)
		}
	}
}

var (
	alertNameRE = regexp.MustCompile(`^[A-Z][A-Za-z0-9]+$`)
	promDurRE   = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)
	tmplLabelRE = regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`)
)

// TestAlertRules checks deploy/alerts.yml without Prometheus: the shape of
// every rule, and that every metric, label and label value its expression
// names is one the service exports, and every label an annotation shows
// survives the expression's aggregation.
func TestAlertRules(t *testing.T) {
	dec := yaml.NewDecoder(strings.NewReader(readRepoFile(t, "deploy/alerts.yml")))
	dec.KnownFields(true)
	var rf ruleFile
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("deploy/alerts.yml: %v", err)
	}
	if len(rf.Groups) == 0 {
		t.Fatal("deploy/alerts.yml: no groups")
	}
	known, values := exported(t)
	seen := map[string]bool{}
	used := map[string]bool{}
	for _, g := range rf.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: want a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			where := g.Name + "/" + r.Alert
			if !alertNameRE.MatchString(r.Alert) {
				t.Errorf("%s: alert name %q: want CamelCase", where, r.Alert)
			}
			if seen[r.Alert] {
				t.Errorf("%s: duplicate alert name", where)
			}
			seen[r.Alert] = true
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: empty expr", where)
			}
			if !promDurRE.MatchString(r.For) {
				t.Errorf("%s: for %q: want a Prometheus duration (say 0s when it should fire at once)", where, r.For)
			}
			if sev := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, sev) {
				t.Errorf("%s: severity %q: want critical, warning or info", where, sev)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", where, a)
				}
			}
			problems, kept := checkExpr(r.Expr, known, values)
			for _, p := range problems {
				t.Errorf("%s: %s", where, p)
			}
			for _, m := range selectorRE.FindAllStringSubmatch(r.Expr, -1) {
				if _, ok := known[m[1]]; ok {
					used[m[1]] = true
				}
			}
			if len(kept) == 0 {
				continue // no aggregation: every label of the series stays
			}
			for _, a := range r.Annotations {
				for _, m := range tmplLabelRE.FindAllStringSubmatch(a, -1) {
					if !slices.Contains(kept, m[1]) {
						t.Errorf("%s: an annotation shows $labels.%s, which the expression aggregates away (kept: %v)", where, m[1], kept)
					}
				}
			}
		}
	}
	// The alerts the operator guide promises.
	for _, want := range []string{"BextBackendErrorSkips", "BextLockLost", "BextScheduleNotRunning",
		"BextLockBackendUnreachable", "BextOverruns", "BextNodeDown", "BextNightlyBackupMissing", "BextRunTooFast"} {
		if !seen[want] {
			t.Errorf("deploy/alerts.yml has no %s alert (docs/OPERATING.md describes it)", want)
		}
	}
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("metrics used by the alerts: %v", names)
}

// ruleTests is deploy/alerts.test.yml, as far as TestEveryRuleTested reads it.
type ruleTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestEveryRuleTested: every alert of deploy/alerts.yml has a promtool
// unit test in which it fires (a rule only ever tested quiet could be
// one that never fires), and no test names an alert that does not exist.
func TestEveryRuleTested(t *testing.T) {
	var rf ruleFile
	if err := yaml.Unmarshal([]byte(readRepoFile(t, "deploy/alerts.yml")), &rf); err != nil {
		t.Fatal(err)
	}
	var rt ruleTests
	if err := yaml.Unmarshal([]byte(readRepoFile(t, "deploy/alerts.test.yml")), &rt); err != nil {
		t.Fatal(err)
	}
	fires, named := map[string]bool{}, map[string]bool{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			named[a.Alertname] = true
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	rules := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			rules[r.Alert] = true
			if !fires[r.Alert] {
				t.Errorf("alert %s has no test in deploy/alerts.test.yml in which it fires", r.Alert)
			}
		}
	}
	for name := range named {
		if !rules[name] {
			t.Errorf("deploy/alerts.test.yml tests %s, which deploy/alerts.yml does not define", name)
		}
	}
}

// TestOperatingListsEveryAlert: docs/OPERATING.md's alert table (the
// rows of "Metrics and alerts") names every alert of deploy/alerts.yml,
// and no alert that does not exist: an operator reads the table, not the
// YAML.
func TestOperatingListsEveryAlert(t *testing.T) {
	t.Parallel()
	var rf ruleFile
	if err := yaml.Unmarshal([]byte(readRepoFile(t, "deploy/alerts.yml")), &rf); err != nil {
		t.Fatal(err)
	}
	doc := readRepoFile(t, "docs/OPERATING.md")
	start := strings.Index(doc, "| alert | on | means |")
	if start < 0 {
		t.Fatal("docs/OPERATING.md has no alert table (| alert | on | means |)")
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(doc[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range regexp.MustCompile("`(Bext[A-Za-z0-9]+)`").FindAllStringSubmatch(first, -1) {
			listed[m[1]] = true
		}
	}
	rules := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			rules[r.Alert] = true
			if !listed[r.Alert] {
				t.Errorf("docs/OPERATING.md's alert table does not list %s (deploy/alerts.yml)", r.Alert)
			}
		}
	}
	for name := range listed {
		if !rules[name] {
			t.Errorf("docs/OPERATING.md's alert table lists %s, which deploy/alerts.yml does not define", name)
		}
	}
}

// TestPromtool runs Prometheus's own checker and the rules' unit tests
// (deploy/alerts.test.yml): the only proof that each alert fires, and stays
// quiet, when it should. promtool comes with Debian's prometheus package,
// which scripts/test-services (make test) installs; without it this fails
// rather than skips, so a green run always means the rules were tested.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not on PATH: run scripts/test-services (or apt-get install prometheus)")
	}
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts.test.yml"},
		{"check", "config", "--syntax-only", "compose/prometheus.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = repo("deploy")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
