package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// floodLimit is the node's descriptor limit (soft and hard) in the flood
// test, and floodConns the idle connections thrown at it: more than it
// has descriptors.
const (
	floodLimit = 256
	floodConns = 3 * floodLimit
)

// TestConnectionFloodLeavesJobsTheirDescriptors: a real node with 256
// descriptors, its HTTP port flooded with more idle connections than that,
// still runs an every-second command job successfully (the cluster's
// history), and answers /healthz once the flood ends. Without a cap on
// connections the server took every descriptor and the jobs failed with
// "pipe2: too many open files", counted as failed runs.
//
// Not parallel, like the package's other every-second cluster tests: 768
// connections and a job a second are load enough on a small machine.
func TestConnectionFloodLeavesJobsTheirDescriptors(t *testing.T) {
	t.Parallel()
	b := opstest.Shared()[0] // Redis: the backend's own connections need descriptors too
	lockingTOML, st := b.New(t)
	c := newOpsCluster(t, lockingTOML, st, `
[[scheduled]]
id = "beat"
cron = "*/1 * * * * *"
hint = "require_global"
command = ["/bin/sh", "-c", '@JOB@']
`)
	// `ulimit -n` sets the soft and the hard limit: the node cannot raise it.
	p := proctest.Start(t, "/bin/sh", []string{"GORACE=atexit_sleep_ms=0"}, "-c", `ulimit -n `+strconv.Itoa(floodLimit)+` && exec "$0" "$@"`,
		bin, "run", "--config", c.cfg, "--node-id", "flooded", "--listen", "127.0.0.1:0")
	addr := p.WaitLog(addrRE, 60*time.Second)[1]
	// Half the descriptors at most for HTTP, and the node says so.
	p.WaitLog(regexp.MustCompile(`max_connections lowered.*serving=128 descriptor_limit=256`), time.Second)
	waitFor(t, "a first run of beat", 30*time.Second, func() bool { return len(c.history("beat")) > 0 })

	f := startFlood(t, addr, floodConns)
	floodStart := time.Now()
	t.Logf("%d idle connections open to %s", floodConns, addr)
	// Runs of ticks after the flood began: at least four, and all good.
	const want = 4
	var during []cluster.Run
	waitFor(t, "four runs of beat during the flood", 60*time.Second, func() bool {
		during = during[:0]
		for _, r := range c.history("beat") {
			if r.Tick.After(floodStart) {
				during = append(during, r)
			}
		}
		return len(during) >= want
	})
	f.stop()
	for _, r := range during {
		if r.Result != "success" {
			t.Errorf("run of tick %s during the flood: %s %q", r.Tick.Format(time.TimeOnly), r.Result, r.Error)
		}
	}

	// Once the flood ends the node answers again (the flood's connections
	// are closed; those still queued are served and find EOF).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatalf("/healthz after the flood: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/healthz after the flood: %d %s", resp.StatusCode, body)
	}
	n := &opsNode{id: "flooded", p: p, addr: addr}
	if failed := n.metric(t, "bext_scheduler_runs_total", `schedule="beat"`, `result="failure"`); failed != 0 {
		t.Errorf("bext_scheduler_runs_total{result=\"failure\"} = %v after the flood, want 0", failed)
	}
}

// flood keeps n idle connections open to an address: each one the server
// closes (it sent no request) is dialled again, until stop.
type flood struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startFlood returns once n connections are established (accepted by the
// server or queued by the kernel).
func startFlood(t *testing.T, addr string, n int) *flood {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &flood{ctx: ctx, cancel: cancel}
	t.Cleanup(f.stop)
	var d net.Dialer
	for range n {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatalf("flood: dialling %s: %v", addr, err)
		}
		f.wg.Go(func() { f.hold(conn, &d, addr) })
	}
	return f
}

// hold keeps conn open until the server closes it, then dials again.
func (f *flood) hold(conn net.Conn, d *net.Dialer, addr string) {
	for {
		stop := context.AfterFunc(f.ctx, func() { conn.Close() })
		_, _ = io.Copy(io.Discard, conn) // returns when either side closes
		conn.Close()
		stop()
		if f.ctx.Err() != nil {
			return
		}
		next, err := d.DialContext(f.ctx, "tcp", addr)
		if err != nil {
			return // stopped, or the node is gone: the test says which
		}
		conn = next
	}
}

func (f *flood) stop() {
	f.cancel()
	f.wg.Wait()
}
