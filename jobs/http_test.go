package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// seenRequest is what the test server received.
type seenRequest struct {
	Method string
	Header http.Header
	Host   string
	Body   string
}

// newServer answers every request with status (and a large body, which the
// job must drain within bounds) and reports what it received.
func newServer(t *testing.T, status int) (*httptest.Server, <-chan seenRequest) {
	t.Helper()
	got := make(chan seenRequest, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seenRequest{Method: r.Method, Header: r.Header.Clone(), Host: r.Host, Body: string(b)}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(strings.Repeat("x", 256<<10)))
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestHTTPRequest(t *testing.T) {
	srv, got := newServer(t, http.StatusOK)
	job := &HTTP{
		URL: srv.URL + "/run", Method: "post", Body: `{"a":1}`, Client: srv.Client(),
		Headers: map[string]string{"Authorization": "Bearer s3cret", "Content-Type": "application/json", "Host": "hooks.example"},
	}
	if err := job.Run(context.Background(), locked); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := <-got
	checks := map[string][2]string{
		"method":           {r.Method, "POST"},
		"body":             {r.Body, `{"a":1}`},
		"host":             {r.Host, "hooks.example"},
		"Authorization":    {r.Header.Get("Authorization"), "Bearer s3cret"},
		"Content-Type":     {r.Header.Get("Content-Type"), "application/json"},
		HeaderScheduleID:   {r.Header.Get(HeaderScheduleID), "nightly"},
		HeaderTickTime:     {r.Header.Get(HeaderTickTime), "2026-11-30T03:00:00+01:00"},
		HeaderNodeID:       {r.Header.Get(HeaderNodeID), "node-a"},
		HeaderFencingToken: {r.Header.Get(HeaderFencingToken), "42"},
	}
	for what, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %q, want %q", what, c[0], c[1])
		}
	}
}

func TestHTTPDefaults(t *testing.T) {
	srv, got := newServer(t, http.StatusNoContent)
	if err := (&HTTP{URL: srv.URL, Client: srv.Client()}).Run(context.Background(), local); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := <-got
	if r.Method != http.MethodGet {
		t.Errorf("method = %s, want GET by default", r.Method)
	}
	if _, ok := r.Header[HeaderFencingToken]; ok {
		t.Errorf("a node-local tick sent %s", HeaderFencingToken)
	}
	if err := (&HTTP{URL: srv.URL, Body: "x", Client: srv.Client()}).Run(context.Background(), local); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r := <-got; r.Method != http.MethodPost {
		t.Errorf("method = %s, want POST when a body is set", r.Method)
	}
}

func TestHTTPStatus(t *testing.T) {
	tests := []struct {
		status  int
		codes   []int
		success bool
	}{
		{200, nil, true},
		{204, nil, true},
		{500, nil, false},
		{404, nil, false},
		{302, nil, false}, // the test server sends no Location: not followed
		{202, []int{202}, true},
		{200, []int{202}, false},
		{404, []int{200, 404}, true},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			srv, got := newServer(t, tt.status)
			// Userinfo, query and header values are secrets: none may reach
			// the error.
			u := strings.Replace(srv.URL, "http://", "http://user:pa55word@", 1) + "/hook?token=qu3ry"
			job := &HTTP{URL: u, SuccessCodes: tt.codes, Client: srv.Client(),
				Headers: map[string]string{"Authorization": "Bearer s3cret"}}
			err := job.Run(context.Background(), local)
			<-got
			if tt.success {
				if err != nil {
					t.Fatalf("Run = %v, want success", err)
				}
				return
			}
			var se *StatusError
			if !errors.As(err, &se) || se.Status != tt.status {
				t.Fatalf("Run = %v, want a *StatusError for %d", err, tt.status)
			}
			msg := err.Error()
			if !strings.Contains(msg, "GET") || !strings.Contains(msg, strings.TrimPrefix(srv.URL, "http://")) {
				t.Errorf("error %q does not name the request", msg)
			}
			// The path goes too: webhook URLs carry their secret there.
			for _, secret := range []string{"pa55word", "user", "qu3ry", "s3cret", "/hook"} {
				if strings.Contains(msg, secret) {
					t.Errorf("error %q leaks %q", msg, secret)
				}
			}
		})
	}
}

// stallingServer holds each request until the client gives up, and reports
// when a request has arrived.
func stallingServer(t *testing.T) (*httptest.Server, <-chan struct{}) {
	t.Helper()
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv, arrived
}

func TestHTTPTimeout(t *testing.T) {
	srv, arrived := stallingServer(t)
	err := (&HTTP{URL: srv.URL + "/?sig=qu3ry", Timeout: 100 * time.Millisecond, Client: srv.Client()}).Run(context.Background(), local)
	<-arrived
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want context.DeadlineExceeded", err)
	}
	if strings.Contains(err.Error(), "qu3ry") {
		t.Errorf("error %q leaks the query", err)
	}
}

func TestHTTPCancel(t *testing.T) {
	srv, arrived := stallingServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&HTTP{URL: srv.URL, Client: srv.Client()}).Run(ctx, local) }()
	<-arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}

func TestHTTPUnreachable(t *testing.T) {
	// A port that was just free: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	err = (&HTTP{URL: "http://admin:pa55word@" + addr + "/x?token=qu3ry", Client: &http.Client{}}).Run(context.Background(), local)
	if err == nil {
		t.Fatal("Run against a closed port succeeded")
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("error %q does not name the host", err)
	}
	for _, secret := range []string{"pa55word", "admin", "qu3ry"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q leaks %q", err, secret)
		}
	}
}

func TestHTTPInvalid(t *testing.T) {
	for _, u := range []string{"", "ftp://host/x", "/relative", "http://user:pa55word@host:badport/"} {
		err := (&HTTP{URL: u}).Run(context.Background(), local)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("URL %q: Run = %v, want ErrInvalid", u, err)
		}
		if err != nil && strings.Contains(err.Error(), "pa55word") {
			t.Errorf("error %q leaks the password", err)
		}
	}
	err := (&HTTP{URL: "http://127.0.0.1/", Method: "BAD METHOD"}).Run(context.Background(), local)
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("bad method: Run = %v, want ErrInvalid", err)
	}
}

// TestHTTPNeverFollowsRedirects sends a job to a real server that redirects
// to a second real server (another host:port): the second must receive
// nothing, neither the custom headers nor a GET made of the POST, and the
// redirect itself is the job's result.
func TestHTTPNeverFollowsRedirects(t *testing.T) {
	var other atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.Add(1)
		t.Errorf("the redirect target received %s %s with X-Api-Key %q", r.Method, r.URL, r.Header.Get("X-Api-Key"))
	}))
	t.Cleanup(elsewhere.Close)

	for _, status := range []int{301, 302, 303, 307, 308} {
		for _, client := range []struct {
			name string
			c    *http.Client
		}{{"default client", nil}, {"caller's client", &http.Client{}}} {
			t.Run(fmt.Sprintf("%d %s", status, client.name), func(t *testing.T) {
				redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, elsewhere.URL+"/steal?token=qu3ry", status)
				}))
				t.Cleanup(redirector.Close)
				job := &HTTP{URL: redirector.URL + "/hook", Method: "POST", Body: `{"a":1}`, Client: client.c,
					Headers: map[string]string{"X-Api-Key": "s3cret"}}

				err := job.Run(context.Background(), locked)
				var se *StatusError
				if !errors.As(err, &se) || se.Status != status {
					t.Fatalf("Run = %v, want a *StatusError for %d (a redirect is a failure)", err, status)
				}
				if !strings.Contains(err.Error(), "not followed") || strings.Contains(err.Error(), "qu3ry") {
					t.Errorf("error %q should say the redirect was not followed, without the Location's query", err)
				}

				job.SuccessCodes = []int{status}
				if err := job.Run(context.Background(), locked); err != nil {
					t.Errorf("with success_codes = [%d]: Run = %v, want success", status, err)
				}
				if n := other.Load(); n != 0 {
					t.Fatalf("the redirect target received %d requests", n)
				}
			})
		}
	}
}
