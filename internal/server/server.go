// Package server owns bext-scheduler's HTTP listener: /metrics for
// Prometheus, /healthz (the process runs), /readyz (the lock backend
// answers) and, with WithAPI, the operators' API under /api/v1/. It binds at Start, so a bad or taken address fails the startup
// instead of a goroutine's log line, and Shutdown waits for its goroutine.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Timeouts. A scrape gathers every metric, which takes milliseconds; the
// bounds are there so a stuck or slow client cannot hold a connection (one
// of at most MaxConnections: a connection that sends nothing is closed
// after readHeaderTimeout, an idle keep-alive one after idleTimeout).
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 30 * time.Second
	// readyTimeout bounds one /readyz check (its ping is bounded too).
	readyTimeout = 5 * time.Second
)

// ErrStarted is returned by a second Start.
var ErrStarted = errors.New("server: already started")

// Server serves /metrics, /healthz and /readyz.
type Server struct {
	addr     string
	logger   *slog.Logger
	srv      *http.Server
	metrics  http.Handler // /metrics: reg through promhttp, or WithMetrics's
	hosts    []string     // WithHosts: names a request's Host may carry
	maxConns int          // WithMaxConnections; 0 is no cap

	mu   sync.Mutex
	ln   net.Listener
	done chan struct{} // closed when the serving goroutine returns
}

// New returns a Server for addr ("host:port"; port 0 picks a free one).
// /metrics serves what reg gathers; /readyz is 200 when ready(ctx) returns
// nil (a nil ready means always ready) and 503 with the error's text
// otherwise, so that text must come from our own code, never carry secrets.
// A nil reg serves no metrics; a nil logger means slog.Default(). Options
// add routes (WithAPI) and limits (WithMaxConnections, WithHosts). Every
// route but /healthz, /readyz and /metrics answers only requests whose Host
// names this node (host.go).
func New(addr string, reg prometheus.Gatherer, ready func(ctx context.Context) error, logger *slog.Logger, opts ...Option) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	if ready == nil {
		ready = func(context.Context) error { return nil }
	}
	if reg == nil {
		reg = prometheus.NewRegistry() // serves an empty page, not a panic
	}
	errLog := slog.NewLogLogger(logger.Handler(), slog.LevelError)
	mux := http.NewServeMux()
	s := &Server{
		addr:   addr,
		logger: logger,
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{
			ErrorLog:      errLog,
			ErrorHandling: promhttp.ContinueOnError, // a broken collector must not hide the others
		}),
	}
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) { s.metrics.ServeHTTP(w, r) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := ready(ctx); err != nil {
			writeText(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return
		}
		writeText(w, http.StatusOK, "ready")
	})
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          errLog,
	}
	for _, o := range opts {
		o(s, mux)
	}
	return s
}

// Start binds the address and serves in a goroutine that Shutdown stops.
// A bad or taken address is an error naming it.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return ErrStarted
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("server: listening on %q: %w", s.addr, err)
	}
	if s.maxConns > 0 {
		ln = newLimitListener(ln, s.maxConns)
	}
	// Guarded here, on the way to the network, rather than in New: tests
	// that serve the handler in process (httptest names example.com) see
	// the routes alone.
	s.srv.Handler = newHostGuard(s.addr, s.hosts).wrap(s.srv.Handler)
	s.ln = ln
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("http server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return nil
}

// Addr is the bound address once started (the real port when addr had
// port 0), else the address New was given.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln.Addr().String()
	}
	return s.addr
}

// Shutdown stops accepting, lets in-flight requests finish until ctx ends,
// then closes what is left, and returns once the serving goroutine has.
// It is a no-op on a Server that was never started.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		// ctx ended with requests still running: cut them.
		err = errors.Join(fmt.Errorf("server: shutdown: %w", err), s.srv.Close())
	}
	<-done
	return err
}

// WithMetrics serves /metrics with h instead of New's registry through
// promhttp (metrics.Metrics.Handler: the per-schedule series of a big
// fleet written without a message per series).
func WithMetrics(h http.Handler) Option {
	return func(s *Server, _ *http.ServeMux) { s.metrics = h }
}

// WithMaxConnections serves at most n connections at once (n > 0); more
// wait in the kernel's accept queue until one closes (limit.go).
func WithMaxConnections(n int) Option {
	return func(s *Server, _ *http.ServeMux) { s.maxConns = n }
}

// WithHosts adds names a request's Host header may carry besides the
// listen address and loopback ([http] hosts; host.go).
func WithHosts(hosts []string) Option {
	return func(s *Server, _ *http.ServeMux) { s.hosts = hosts }
}

func writeText(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = fmt.Fprintln(w, body) // the client went away: nothing to do
}
