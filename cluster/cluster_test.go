package cluster_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/bext-dev/bext-scheduler/cluster"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestBound(t *testing.T) {
	cases := []struct {
		name             string
		err, out         string
		wantErr, wantOut string
	}{
		{"untouched", "exit status 1", "a\nb\n", "exit status 1", "a\nb\n"},
		{"first line", "one\ntwo", "", "one", ""},
		{"first line crlf", "one\r\ntwo", "", "one", ""},
		{"long error", strings.Repeat("e", 2*cluster.MaxErrorLen), "", strings.Repeat("e", cluster.MaxErrorLen), ""},
		{"error cut before a character", "x" + strings.Repeat("é", cluster.MaxErrorLen), "",
			"x" + strings.Repeat("é", (cluster.MaxErrorLen-1)/2), ""},
		{"output tail", "", "HEAD" + strings.Repeat("o", cluster.MaxOutputTail), "", strings.Repeat("o", cluster.MaxOutputTail)},
		{"output cut after a character", "", strings.Repeat("€", cluster.MaxOutputTail/3) + "ab", "",
			strings.Repeat("€", (cluster.MaxOutputTail-2)/3) + "ab"},
		{"invalid and NUL", "bad\xff\x00", "\x00out\xfe", "bad\uFFFD\uFFFD", "\uFFFDout\uFFFD"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := cluster.Bound(cluster.Run{Error: c.err, OutputTail: c.out})
			if r.Error != c.wantErr {
				t.Errorf("Error = %q (%d bytes), want %q (%d bytes)", r.Error, len(r.Error), c.wantErr, len(c.wantErr))
			}
			if r.OutputTail != c.wantOut {
				t.Errorf("OutputTail = %d bytes, want %d bytes", len(r.OutputTail), len(c.wantOut))
			}
			for _, s := range []string{r.Error, r.OutputTail} {
				if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
					t.Errorf("bounded text %q is not valid UTF-8 without NUL", s)
				}
			}
			if again := cluster.Bound(r); again != r {
				t.Errorf("Bound is not idempotent")
			}
		})
	}
}

// A run's JSON has the contract's names, duration in seconds, and decodes
// back to the same run.
func TestRunJSON(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r := cluster.Run{Schedule: "s", Tick: at, Node: "n", Result: "success", StartedAt: at.Add(time.Millisecond),
		Duration: 1500*time.Millisecond + time.Microsecond, Fence: 1 << 52, Manual: true, Attempts: 2, RunID: "id"}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"schedule":"s","tick":"2026-03-01T12:00:00Z","node":"n","result":"success",` +
		`"started_at":"2026-03-01T12:00:00.001Z","duration_seconds":1.500001,"fence":4503599627370496,` +
		`"manual":true,"attempts":2,"error":"","run_id":"id","output_tail":"","anomaly":null,"by":null}`
	if string(b) != want {
		t.Fatalf("json = %s\nwant   %s", b, want)
	}
	var back cluster.Run
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != r {
		t.Fatalf("round trip = %+v, want %+v", back, r)
	}
	// A manual run that overran: both fields are strings.
	r.Anomaly, r.By = cluster.AnomalyOverrun, "alice@host-1"
	b, err = json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), `"anomaly":"overrun","by":"alice@host-1"}`) {
		t.Fatalf("json = %s, want anomaly overrun and by alice@host-1", b)
	}
	back = cluster.Run{}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != r {
		t.Fatalf("round trip = %+v, want %+v", back, r)
	}
	if err := json.Unmarshal([]byte(`{"fence":"x"}`), &back); err == nil {
		t.Fatal("decoding a string fence = nil error")
	}
}

func TestChecks(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	bad := map[string]error{
		"CheckSchedule":    cluster.CheckSchedule(""),
		"CheckKeep":        cluster.CheckKeep(0),
		"CheckLimit":       cluster.CheckLimit(0),
		"CheckNode":        cluster.CheckNode(cluster.Node{NodeID: "n"}, 0),
		"CheckNodeID":      cluster.CheckNodeID("a\nb"),
		"CheckRequest id":  cluster.CheckRequest(cluster.Request{Schedule: "s", Tick: at}),
		"CheckRequest tk":  cluster.CheckRequest(cluster.Request{Schedule: "s", ID: "i"}),
		"CheckTake ttl":    cluster.CheckTake(cluster.TakeReq{Schedule: "s", Node: "n"}),
		"CheckRun":         cluster.CheckRun(cluster.Run{Schedule: "s"}),
		"CheckRun anomaly": cluster.CheckRun(cluster.Run{Schedule: "s", RunID: "r", Anomaly: "slow"}),
	}
	for name, err := range bad {
		if !errors.Is(err, cluster.ErrInvalid) {
			t.Errorf("%s = %v, want ErrInvalid", name, err)
		}
	}
	if err := cluster.CheckTake(cluster.TakeReq{Schedule: "s", Node: "n", TTL: time.Second}); err != nil {
		t.Errorf("CheckTake(good) = %v", err)
	}
	if err := cluster.CheckRequest(cluster.Request{Schedule: "s", ID: "i", Tick: at}); err != nil {
		t.Errorf("CheckRequest(good) = %v", err)
	}
}
