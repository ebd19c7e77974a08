package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

const (
	writeTok = "w-4f9c2d7e1a0b3c5d"
	readTok  = "r-8e7d6c5b4a392817"
)

// syncBuffer is a log sink the server's goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// apiServer is a started server with the API over st for schedules
// prefix+"job" (overlap skip) and prefix+"many" (allow), and its log.
type apiServer struct {
	base string
	svc  *ops.Service
	log  *syncBuffer
}

func startAPI(t *testing.T, st ops.Store, prefix, token, readToken string) *apiServer {
	t.Helper()
	spec, err := cronspec.Parse("*/5 * * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	defs := []scheduler.Schedule{
		{ID: prefix + "job", CronExpr: "*/5 * * * *", Spec: spec},
		{ID: prefix + "many", CronExpr: "*/5 * * * *", Spec: spec, Overlap: scheduler.OverlapAllow},
	}
	svc := ops.New(st, defs, ops.Options{By: "api", Poll: 5 * time.Millisecond})
	log := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := New("127.0.0.1:0", nil, nil, logger, WithAPI(APIConfig{Ops: svc, Token: token, ReadToken: readToken}))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return &apiServer{base: "http://" + s.Addr(), svc: svc, log: log}
}

// call sends a request with an optional bearer token and body.
func call(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
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
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, url, ct)
	}
	return resp.StatusCode, string(b)
}

func prefix(t *testing.T) string { return strings.ReplaceAll(t.Name(), "/", ".") + "." }

func TestAPIAuth(t *testing.T) {
	opstest.ForEach(t, func(t *testing.T, st ops.Store) {
		p := prefix(t)
		job := url.PathEscape(p + "job")
		var bodies strings.Builder
		check := func(a *apiServer, method, path, token string, want int) string {
			t.Helper()
			code, body := call(t, method, a.base+path, token, "")
			bodies.WriteString(body)
			if code != want {
				t.Errorf("%s %s with token %q: %d, want %d\n%s", method, path, token, code, want, body)
			}
			return body
		}

		t.Run("no token configured", func(t *testing.T) {
			a := startAPI(t, st, p, "", "")
			check(a, "GET", "/api/v1/status", "", 200)
			for _, w := range []string{"trigger", "pause", "resume", "backfill"} {
				body := check(a, "POST", "/api/v1/schedules/"+job+"/"+w, writeTok, 403)
				if !strings.Contains(body, "[http] token") {
					t.Errorf("403 does not say how to set a token: %s", body)
				}
			}
			if g, _ := st.GetPause(t.Context(), p+"job"); g.Paused {
				t.Error("a refused pause paused the schedule")
			}
		})

		t.Run("write token", func(t *testing.T) {
			a := startAPI(t, st, p, writeTok, "")
			check(a, "GET", "/api/v1/schedules", "", 200) // reads open without a read token
			check(a, "POST", "/api/v1/schedules/"+job+"/pause", "", 401)
			check(a, "POST", "/api/v1/schedules/"+job+"/pause", "wrong", 401)
			check(a, "POST", "/api/v1/schedules/"+job+"/pause", writeTok+"x", 401)
			check(a, "POST", "/api/v1/schedules/"+job+"/pause", writeTok[:len(writeTok)-1], 401)
			if g, _ := st.GetPause(t.Context(), p+"job"); g.Paused {
				t.Fatal("a pause with a wrong token paused the schedule")
			}
			check(a, "POST", "/api/v1/schedules/"+job+"/pause", writeTok, 200)
			if g, _ := st.GetPause(t.Context(), p+"job"); !g.Paused {
				t.Error("a pause with the right token did not pause")
			}
			check(a, "POST", "/api/v1/schedules/"+job+"/resume", writeTok, 200)
			if !strings.Contains(a.log.String(), "api: pause") {
				t.Errorf("the write is not logged:\n%s", a.log.String())
			}
			if strings.Contains(a.log.String(), writeTok) {
				t.Errorf("the log shows the token:\n%s", a.log.String())
			}
		})

		t.Run("read token", func(t *testing.T) {
			a := startAPI(t, st, p, writeTok, readTok)
			for _, path := range []string{"/api/v1/status", "/api/v1/schedules", "/api/v1/nodes", "/api/v1/schedules/" + job + "/runs"} {
				check(a, "GET", path, "", 401)
				check(a, "GET", path, "wrong", 401)
				check(a, "GET", path, readTok, 200)
				check(a, "GET", path, writeTok, 200)
			}
			check(a, "POST", "/api/v1/schedules/"+job+"/resume", readTok, 401) // the read token never writes
			check(a, "POST", "/api/v1/schedules/"+job+"/resume", writeTok, 200)
			if strings.Contains(a.log.String(), writeTok) || strings.Contains(a.log.String(), readTok) {
				t.Errorf("the log shows a token:\n%s", a.log.String())
			}
		})

		if b := bodies.String(); strings.Contains(b, writeTok) || strings.Contains(b, readTok) {
			t.Errorf("an answer shows a token:\n%s", b)
		}
	})
}

func TestAPIEndpoints(t *testing.T) {
	opstest.ForEach(t, func(t *testing.T, st ops.Store) {
		ctx := t.Context()
		p := prefix(t)
		job := url.PathEscape(p + "job")
		a := startAPI(t, st, p, writeTok, "")
		base := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
		var runs []cluster.Run
		for i := range 3 {
			runs = append(runs, cluster.Run{Schedule: p + "job", Tick: base.Add(time.Duration(i) * 5 * time.Minute), Node: []string{"a", "b", "c"}[i],
				Result: "success", StartedAt: base.Add(time.Duration(i)*5*time.Minute + time.Second), Duration: 250 * time.Millisecond, Fence: int64(10 + i), Attempts: 1, RunID: []string{"r0", "r1", "r2"}[i]})
		}
		if err := st.RecordRuns(ctx, runs, 100); err != nil {
			t.Fatal(err)
		}
		if err := st.Announce(ctx, cluster.Node{NodeID: p + "n1", Version: "v", StartedAt: base, ConfigHash: "h"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Leave(context.Background(), p+"n1") })

		t.Run("reads", func(t *testing.T) {
			code, body := call(t, "GET", a.base+"/api/v1/status", "", "")
			var s ops.Status
			if err := json.Unmarshal([]byte(body), &s); code != 200 || err != nil || len(s.Schedules) != 2 || s.Schedules[0].LastRun == nil || s.Schedules[0].LastRun.RunID != "r2" {
				t.Errorf("status %d %v: %s", code, err, body)
			}
			code, body = call(t, "GET", a.base+"/api/v1/schedules", "", "")
			var ss []ops.Schedule
			if err := json.Unmarshal([]byte(body), &ss); code != 200 || err != nil || len(ss) != 2 || ss[1].ID != p+"many" {
				t.Errorf("schedules %d %v: %s", code, err, body)
			}
			code, body = call(t, "GET", a.base+"/api/v1/nodes", "", "")
			var ns []ops.Node
			found := false
			if err := json.Unmarshal([]byte(body), &ns); code != 200 || err != nil {
				t.Errorf("nodes %d %v: %s", code, err, body)
			}
			for _, n := range ns {
				found = found || n.NodeID == p+"n1"
			}
			if !found {
				t.Errorf("nodes lack %sn1: %s", p, body)
			}
			code, body = call(t, "GET", a.base+"/api/v1/schedules/"+job+"/runs?limit=2", "", "")
			var rs []ops.Run
			if err := json.Unmarshal([]byte(body), &rs); code != 200 || err != nil || len(rs) != 2 || rs[0].RunID != "r2" || rs[1].RunID != "r1" {
				t.Errorf("runs %d %v: %s", code, err, body)
			}
			if !strings.Contains(body, `"duration_seconds": 0.25`) || !strings.Contains(body, `"fence": 12`) {
				t.Errorf("runs JSON lacks duration_seconds or a numeric fence: %s", body)
			}
			for path, want := range map[string]int{
				"/api/v1/schedules/" + job + "/runs?limit=x": 400,
				"/api/v1/schedules/" + job + "/runs?limit=0": 400,
				"/api/v1/schedules/nope/runs":                404,
				"/api/v1/nothing":                            404,
			} {
				if code, body := call(t, "GET", a.base+path, "", ""); code != want {
					t.Errorf("GET %s: %d, want %d: %s", path, code, want, body)
				}
			}
		})

		t.Run("unknown schedule", func(t *testing.T) {
			for _, w := range []string{"trigger", "pause", "resume", "backfill"} {
				code, body := call(t, "POST", a.base+"/api/v1/schedules/nope/"+w, writeTok, "")
				if code != 404 || !strings.Contains(body, `"unknown_schedule"`) {
					t.Errorf("%s of an unknown schedule: %d %s", w, code, body)
				}
			}
		})

		t.Run("pause with a note and an end", func(t *testing.T) {
			until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
			code, body := call(t, "POST", a.base+"/api/v1/schedules/"+job+"/pause", writeTok,
				`{"note": "incident 7", "until": "`+until.Format(time.RFC3339)+`"}`)
			if code != 200 {
				t.Fatalf("pause: %d %s", code, body)
			}
			g, err := st.GetPause(ctx, p+"job")
			if err != nil || !g.Paused || g.Note != "incident 7" || !g.Until.Equal(until) {
				t.Errorf("stored %+v %v", g, err)
			}
			for _, bad := range []string{`{"note": 3}`, `{"nope": 1}`, `not json`, `{"until": "2001-01-01T00:00:00Z"}`} {
				if code, body := call(t, "POST", a.base+"/api/v1/schedules/"+job+"/pause", writeTok, bad); code != 400 {
					t.Errorf("pause %s: %d %s", bad, code, body)
				}
			}
			if code, body := call(t, "POST", a.base+"/api/v1/schedules/"+job+"/resume", writeTok, ""); code != 200 || !strings.Contains(body, `"paused": false`) {
				t.Errorf("resume: %d %s", code, body)
			}
		})

		t.Run("trigger", func(t *testing.T) {
			// Nobody takes it: 202, queued.
			code, body := call(t, "POST", a.base+"/api/v1/schedules/"+job+"/trigger?wait=10ms", writeTok, "")
			if code != 202 || !strings.Contains(body, `"accepted": false`) || !strings.Contains(body, `"node": ""`) {
				t.Errorf("unaccepted trigger: %d %s", code, body)
			}
			// A node takes that one first (its lock held while the API
			// checks the next trigger would answer 409: a race of the test,
			// not of the API).
			if tk, err := st.TakeRequest(ctx, cluster.TakeReq{Schedule: p + "job", Node: "node-y", TTL: time.Minute}); err != nil || tk.Handle == nil {
				t.Fatalf("taking the queued trigger: %+v, %v", tk, err)
			} else if err := st.(locking.Locker).Release(ctx, tk.Handle); err != nil {
				t.Fatal(err)
			}
			// A node takes the next: 200 naming the node.
			nctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for nctx.Err() == nil {
					tk, err := st.TakeRequest(nctx, cluster.TakeReq{Schedule: p + "job", Node: "node-z", TTL: time.Minute})
					if err == nil && tk.Handle != nil {
						_ = st.(locking.Locker).Release(context.WithoutCancel(nctx), tk.Handle)
					}
					select {
					case <-nctx.Done():
					case <-time.After(5 * time.Millisecond):
					}
				}
			}()
			code, body = call(t, "POST", a.base+"/api/v1/schedules/"+job+"/trigger", writeTok, "")
			cancel()
			<-done
			var ans ops.TriggerAnswer
			if err := json.Unmarshal([]byte(body), &ans); code != 200 || err != nil || !ans.Accepted || ans.Node != "node-z" || ans.Schedule != p+"job" {
				t.Errorf("accepted trigger: %d %s", code, body)
			}
			// Running elsewhere under skip: 409 at once.
			h, err := st.(locking.Locker).TryLock(ctx, p+"job", time.Minute)
			if err != nil || h == nil {
				t.Fatalf("TryLock %v %v", h, err)
			}
			defer func() { _ = st.(locking.Locker).Release(context.WithoutCancel(ctx), h) }()
			if code, body := call(t, "POST", a.base+"/api/v1/schedules/"+job+"/trigger", writeTok, ""); code != 409 || !strings.Contains(body, `"running"`) {
				t.Errorf("trigger while running: %d %s", code, body)
			}
		})

		t.Run("backfill", func(t *testing.T) {
			body := `{"from": "2026-01-10T00:00:00Z", "to": "2026-01-10T00:10:00Z"}`
			code, out := call(t, "POST", a.base+"/api/v1/schedules/"+url.PathEscape(p+"many")+"/backfill", writeTok, body)
			var ans ops.BackfillAnswer
			if err := json.Unmarshal([]byte(out), &ans); code != 202 || err != nil || len(ans.Ticks) != 3 {
				t.Errorf("backfill: %d %s", code, out)
			}
			if code, out := call(t, "POST", a.base+"/api/v1/schedules/"+url.PathEscape(p+"many")+"/backfill", writeTok, body); code != 409 || !strings.Contains(out, `"busy"`) {
				t.Errorf("second backfill: %d %s", code, out)
			}
			if code, out := call(t, "POST", a.base+"/api/v1/schedules/"+job+"/backfill", writeTok, `{"from": "2026-01-10T00:00:00Z", "to": "2026-02-10T00:00:00Z"}`); code != 400 || !strings.Contains(out, "more than 1000") {
				t.Errorf("backfill of 8,929 ticks: %d %s", code, out)
			}
		})
	})
}

// The Client the CLI uses for the memory backend answers what the Service
// answers, and maps the API's errors back to the ops sentinels.
func TestClientRoundTrip(t *testing.T) {
	ctx := t.Context()
	st := opstest.Memory(t)
	p := prefix(t)
	a := startAPI(t, st, p, writeTok, readTok)
	addr := strings.TrimPrefix(a.base, "http://")
	c, err := ops.NewClient(addr, writeTok, readTok)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if ans, err := c.Pause(ctx, p+"job", ops.PauseRequest{Note: "n", Until: &until}); err != nil || !ans.Paused || !ans.Until.Equal(until) {
		t.Fatalf("Pause = %+v, %v", ans, err)
	}
	got, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := a.svc.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if !bytes.Equal(gj, wj) {
		t.Errorf("client status %s\nservice status %s", gj, wj)
	}
	if _, err := c.Resume(ctx, p+"job"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Runs(ctx, "nope", 1); !errors.Is(err, ops.ErrUnknownSchedule) {
		t.Errorf("Runs of unknown: %v", err)
	}
	if _, err := c.Backfill(ctx, p+"job", time.Time{}, time.Time{}); !errors.Is(err, ops.ErrInvalid) {
		t.Errorf("Backfill without a range: %v", err)
	}
	lk := st.(locking.Locker)
	h, err := lk.TryLock(ctx, p+"job", time.Minute)
	if err != nil || h == nil {
		t.Fatal(h, err)
	}
	if _, err := c.Trigger(ctx, p+"job", time.Second); !errors.Is(err, ops.ErrRunning) {
		t.Errorf("Trigger while running: %v", err)
	}
	_ = lk.Release(ctx, h)

	wrong, _ := ops.NewClient(addr, "nope", "nope")
	if _, err := wrong.Status(ctx); !errors.Is(err, ops.ErrUnauthorized) {
		t.Errorf("wrong read token: %v", err)
	}
	if _, err := wrong.Resume(ctx, p+"job"); !errors.Is(err, ops.ErrUnauthorized) {
		t.Errorf("wrong write token: %v", err)
	}

	// Nothing listens: unavailable.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	d, _ := ops.NewClient(dead, writeTok, "")
	if _, err := d.Status(ctx); !errors.Is(err, ops.ErrUnavailable) {
		t.Errorf("dead node: %v", err)
	}
}

// A backfill never reaches past the schedule's tick mark or now: a range
// holding a later tick is refused with 400, naming the latest tick a
// backfill may run; nothing is queued. Up to that tick it is accepted.
func TestAPIBackfillPastTheMark(t *testing.T) {
	opstest.ForEach(t, func(t *testing.T, st ops.Store) {
		p := prefix(t)
		a := startAPI(t, st, p, writeTok, "")
		ctx := t.Context()
		// The schedule's latest tick (every 5 minutes) is claimed, as a node
		// running it would have: the mark is at it.
		last := time.Now().UTC().Truncate(5 * time.Minute)
		ans, err := st.(locking.TickLocker).TryLockTick(ctx, locking.TickRequest{Key: p + "job", Tick: last, TTL: time.Minute,
			MaxSkew: time.Minute, Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if ans.Handle != nil {
			if err := st.(locking.Locker).Release(ctx, ans.Handle); err != nil {
				t.Fatal(err)
			}
		}
		job := url.PathEscape(p + "job")
		body := fmt.Sprintf(`{"from": %q, "to": %q}`, last.Add(-10*time.Minute).Format(time.RFC3339), time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		code, out := call(t, "POST", a.base+"/api/v1/schedules/"+job+"/backfill", writeTok, body)
		if code != 400 || !strings.Contains(out, `"invalid"`) || !strings.Contains(out, last.Format(time.RFC3339)) {
			t.Errorf("backfill up to an hour ahead: %d %s; want 400 naming the latest tick a backfill may run, %s", code, out, last.Format(time.RFC3339))
		}
		if q, err := st.Requests(ctx, p+"job"); err != nil || len(q) != 0 {
			t.Errorf("a refused backfill queued %+v, %v", q, err)
		}
		body = fmt.Sprintf(`{"from": %q, "to": %q}`, last.Add(-10*time.Minute).Format(time.RFC3339), last.Format(time.RFC3339))
		code, out = call(t, "POST", a.base+"/api/v1/schedules/"+job+"/backfill", writeTok, body)
		var got ops.BackfillAnswer
		if err := json.Unmarshal([]byte(out), &got); code != 202 || err != nil || len(got.Ticks) != 3 || !got.Ticks[2].Equal(last) {
			t.Errorf("backfill up to the latest tick: %d %s; want 202 with 3 ticks", code, out)
		}
	})
}
