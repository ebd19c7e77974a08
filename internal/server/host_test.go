package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// TestHostGuard: a request naming a host the node is not known by (a web
// page's own name rebound to the node's address) is refused with 421 on
// the API and the page, and served on the probe endpoints; the names the
// node is known by are served.
func TestHostGuard(t *testing.T) {
	t.Parallel()
	st := opstest.Memory(t)
	spec, err := cronspec.Parse("*/5 * * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	svc := ops.New(st, []scheduler.Schedule{{ID: "hg.job", CronExpr: "*/5 * * * *", Spec: spec}}, ops.Options{By: "api"})
	// startOn returns the URL to reach the server by (127.0.0.1 whatever
	// it listens on) and its port.
	startOn := func(t *testing.T, listen string, hosts []string) (base, port string) {
		s := New(listen, nil, nil, slog.New(slog.DiscardHandler),
			WithAPI(APIConfig{Ops: svc, Token: writeTok}), WithHosts(hosts))
		start(t, s)
		_, port, _ = net.SplitHostPort(s.Addr())
		return "http://127.0.0.1:" + port, port
	}
	type req struct {
		method, path, host string
		want               int
	}
	for _, tc := range []struct {
		name, listen string
		hosts        []string
		reqs         []req
	}{
		{"loopback listen", "127.0.0.1:0", nil, []req{
			{"GET", "/api/v1/status", "127.0.0.1:PORT", 200},
			{"GET", "/api/v1/status", "localhost:PORT", 200},
			{"GET", "/api/v1/status", "LocalHost", 200},
			{"GET", "/api/v1/status", "app.localhost:PORT", 200},
			{"GET", "/api/v1/status", "[::1]:PORT", 200},
			{"GET", "/api/v1/status", "evil.example:PORT", 421},
			{"GET", "/api/v1/status", "evil.example", 421},
			{"GET", "/api/v1/status", "10.1.2.3:PORT", 421},
			{"GET", "/", "evil.example:PORT", 421},
			{"GET", "/schedules/hg.job", "evil.example:PORT", 421},
			{"POST", "/api/v1/schedules/hg.job/pause", "evil.example:PORT", 421},
			{"GET", "/api/v1/nope", "evil.example:PORT", 421},
			// Probes and Prometheus use whatever name they know the node by.
			{"GET", "/healthz", "evil.example:PORT", 200},
			{"GET", "/readyz", "evil.example:PORT", 200},
			{"GET", "/metrics", "evil.example:PORT", 200},
		}},
		{"any-address listen with hosts", "0.0.0.0:0", []string{"bext.example.com", "node-a"}, []req{
			{"GET", "/api/v1/status", "10.1.2.3:PORT", 200},
			{"GET", "/api/v1/status", "[fd00::5]:PORT", 200},
			{"GET", "/api/v1/status", "bext.example.com:PORT", 200},
			{"GET", "/api/v1/status", "BEXT.Example.COM.", 200},
			{"GET", "/api/v1/status", "node-a", 200},
			{"GET", "/api/v1/status", "localhost:PORT", 200},
			{"GET", "/api/v1/status", "node-b:PORT", 421},
			{"GET", "/api/v1/status", "bext.example.com.evil.example", 421},
			{"GET", "/", "rebind.evil.example:PORT", 421},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, port := startOn(t, tc.listen, tc.hosts)
			for _, r := range tc.reqs {
				host := strings.ReplaceAll(r.host, "PORT", port)
				code, body := hostRequest(t, r.method, base+r.path, host)
				if code != r.want {
					t.Errorf("%s %s with Host %q: %d, want %d\n%s", r.method, r.path, host, code, r.want, body)
					continue
				}
				if code == http.StatusMisdirectedRequest && (!strings.Contains(body, "[http] hosts") || !strings.Contains(body, `"unknown_host"`)) {
					t.Errorf("%s %s with Host %q: the 421 does not say what to do: %s", r.method, r.path, host, body)
				}
			}
		})
	}
}

// hostRequest sends a request with the given Host header.
func hostRequest(t *testing.T, method, url, host string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %q): %v", method, url, host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
