package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bext-dev/bext-scheduler/metrics"
)

// bext_scheduler_ticks_lost has a series per schedule with a lost tick in
// the last audit, and none for a schedule that has none any more.
func TestSetLostTicks(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{Version: "v", Commit: "c", GoVersion: "go"})
	m.SetLostTicks(map[string]int{"a": 2, "b": 1, "c": 0})
	want := `
# HELP bext_scheduler_ticks_lost ` + lostHelp(t, reg) + `
# TYPE bext_scheduler_ticks_lost gauge
bext_scheduler_ticks_lost{schedule="a"} 2
bext_scheduler_ticks_lost{schedule="b"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "bext_scheduler_ticks_lost"); err != nil {
		t.Fatal(err)
	}
	m.SetLostTicks(map[string]int{"b": 3})
	want = `
# HELP bext_scheduler_ticks_lost ` + lostHelp(t, reg) + `
# TYPE bext_scheduler_ticks_lost gauge
bext_scheduler_ticks_lost{schedule="b"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "bext_scheduler_ticks_lost"); err != nil {
		t.Fatal(err)
	}
	m.SetLostTicks(nil)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "bext_scheduler_ticks_lost" && len(f.GetMetric()) > 0 {
			t.Fatalf("%d series after an audit with nothing lost, want none", len(f.GetMetric()))
		}
	}
}

func lostHelp(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "bext_scheduler_ticks_lost" {
			return f.GetHelp()
		}
	}
	t.Fatal("bext_scheduler_ticks_lost not registered")
	return ""
}
