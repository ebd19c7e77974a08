package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// client keeps no idle connections, so nothing outlives a test.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

func get(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// readiness is a ready func whose answer the test sets.
type readiness struct {
	mu  sync.Mutex
	err error
}

func (r *readiness) set(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

func (r *readiness) ready(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func start(t *testing.T, s *Server) string {
	t.Helper()
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return "http://" + s.Addr()
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "bext_test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(3)
	r := &readiness{}
	base := start(t, New("127.0.0.1:0", reg, r.ready, slog.New(slog.DiscardHandler)))

	if code, body := get(t, "GET", base+"/metrics"); code != 200 || !strings.Contains(body, "bext_test_things_total 3") {
		t.Errorf("/metrics = %d %q, want 200 with the registry's counter", code, body)
	}
	if code, body := get(t, "GET", base+"/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	if code, _ := get(t, "GET", base+"/readyz"); code != 200 {
		t.Errorf("/readyz while ready = %d, want 200", code)
	}
	r.set(errors.New(`lock backend "redis" is unavailable`))
	if code, body := get(t, "GET", base+"/readyz"); code != 503 || !strings.Contains(body, `lock backend "redis" is unavailable`) {
		t.Errorf("/readyz while not ready = %d %q, want 503 with the reason", code, body)
	}
	if code, _ := get(t, "GET", base+"/healthz"); code != 200 {
		t.Errorf("/healthz while not ready = %d, want 200: the process still runs", code)
	}
	if code, _ := get(t, "POST", base+"/healthz"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz = %d, want 405", code)
	}
	if code, _ := get(t, "GET", base+"/nope"); code != 404 {
		t.Errorf("/nope = %d, want 404", code)
	}
}

// WithMetrics's handler answers /metrics instead of the registry's.
func TestWithMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "bext_test_registry_total", Help: "Unused."}))
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "bext_test_own 1\n") })
	base := start(t, New("127.0.0.1:0", reg, nil, nil, WithMetrics(h)))
	if code, body := get(t, "GET", base+"/metrics"); code != 200 || body != "bext_test_own 1\n" {
		t.Errorf("/metrics = %d %q, want 200 and the handler's own body", code, body)
	}
}

func TestNilReadyIsReady(t *testing.T) {
	base := start(t, New("127.0.0.1:0", prometheus.NewRegistry(), nil, nil))
	if code, _ := get(t, "GET", base+"/readyz"); code != 200 {
		t.Errorf("/readyz with no check = %d, want 200", code)
	}
}

func TestBadAddress(t *testing.T) {
	s := New("127.0.0.1:notaport", prometheus.NewRegistry(), nil, nil)
	if err := s.Start(); err == nil || !strings.Contains(err.Error(), `"127.0.0.1:notaport"`) {
		t.Errorf("Start on a bad address = %v, want an error naming it", err)
	}

	first := New("127.0.0.1:0", prometheus.NewRegistry(), nil, nil)
	start(t, first)
	taken := first.Addr()
	err := New(taken, prometheus.NewRegistry(), nil, nil).Start()
	if err == nil || !strings.Contains(err.Error(), taken) {
		t.Errorf("Start on a taken address = %v, want an error naming %s", err, taken)
	}
	if err := first.Start(); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start = %v, want ErrStarted", err)
	}
}

func TestShutdown(t *testing.T) {
	// A readiness check that hangs until its request is cut.
	entered := make(chan struct{})
	hang := func(ctx context.Context) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	}
	s := New("127.0.0.1:0", prometheus.NewRegistry(), hang, nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr()
	reqDone := make(chan error, 1)
	go func() {
		resp, err := client.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		reqDone <- err
	}()
	<-entered

	// The in-flight request outlasts the grace: Shutdown cuts it, reports
	// it, and returns only once the serving goroutine has (goleak checks).
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a stuck request = %v, want DeadlineExceeded", err)
	}
	<-reqDone
	if _, err := client.Get(base + "/healthz"); err == nil {
		t.Error("the server still answers after Shutdown")
	}
	if err := New("127.0.0.1:0", nil, nil, nil).Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown of a server never started = %v", err)
	}
}
