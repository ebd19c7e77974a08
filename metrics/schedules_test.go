package metrics

import "testing"

// The per-schedule arrays hold one counter per value of their label.
func TestSeriesSized(t *testing.T) {
	var se series
	if len(se.skipped) != len(skipReasons) || len(se.runs) != len(runResults) || len(se.anomalies) != len(anomalyKinds) {
		t.Fatalf("series holds %d skip, %d run and %d anomaly counters; the label values are %d, %d and %d",
			len(se.skipped), len(se.runs), len(se.anomalies), len(skipReasons), len(runResults), len(anomalyKinds))
	}
	if maxValues < max(len(skipReasons), len(runResults), len(anomalyKinds)) {
		t.Fatalf("maxValues %d is below a family's values", maxValues)
	}
}
