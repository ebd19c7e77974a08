package server

import (
	"net/http"
	"testing"

	"github.com/bext-dev/bext-scheduler/locking/memory"
)

// read_token guards the API's reads (and the page), not the endpoints
// Prometheus and the orchestrator's probes call without a token: /metrics,
// /healthz and /readyz stay open, as README says.
func TestReadTokenLeavesProbesOpen(t *testing.T) {
	t.Parallel()
	a := startAPI(t, memory.New(), prefix(t), "write-token-1234", "read-token-5678")
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		resp, err := client.Get(a.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200 (read_token does not guard it)", path, resp.StatusCode)
		}
	}
	if code, _ := call(t, "GET", a.base+"/api/v1/status", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/status without the read token: %d, want 401", code)
	}
}
