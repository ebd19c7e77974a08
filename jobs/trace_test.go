package jobs

import (
	"context"
	"net/http"
	"testing"
)

const testParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestHTTPSendsTraceParent: a traced run's request carries its trace
// parent as the W3C traceparent header; an untraced one none.
func TestHTTPSendsTraceParent(t *testing.T) {
	srv, got := newServer(t, http.StatusOK)
	job := &HTTP{URL: srv.URL, Client: srv.Client()}
	for _, c := range []struct{ tp, want string }{{testParent, testParent}, {"", ""}} {
		tick := locked
		tick.TraceParent = c.tp
		if err := job.Run(context.Background(), tick); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if h := (<-got).Header.Get("traceparent"); h != c.want {
			t.Errorf("traceparent %q, want %q", h, c.want)
		}
	}
}

// TestCommandGetsTraceParent: a traced run's command gets TRACEPARENT;
// an untraced one never inherits the node's own.
func TestCommandGetsTraceParent(t *testing.T) {
	t.Setenv(EnvTraceParent, "00-stale")
	for _, c := range []struct{ tp, want string }{{testParent, "tp=" + testParent}, {"", "tp="}} {
		rec := newRecorder()
		tick := local
		tick.TraceParent = c.tp
		if err := sh(rec, `echo "tp=$TRACEPARENT"`).Run(context.Background(), tick); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got := rec.lines("stdout"); len(got) != 1 || got[0] != c.want {
			t.Errorf("child saw %q, want %q", got, c.want)
		}
	}
}
