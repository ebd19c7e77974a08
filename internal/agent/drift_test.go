package agent_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/agent"
	"github.com/bext-dev/bext-scheduler/locking/memory"
)

// syncBuf is a log the test reads while the agents write it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Two nodes that define x differently: once each sees the drift, it
// announces x's field hashes (x's only, not y's, which agree), and the
// warning names the field that differs.
func TestDriftAnnouncesFieldsOfDriftedSchedules(t *testing.T) {
	t.Parallel()
	mem := memory.New()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	logs := &syncBuf{}
	//            cron zone hint timing job ticks
	same := strings.Repeat("0000", 6)
	other := "1111" + "0000" + "0000" + "0000" + "2222" + "3333" // cron and job
	for _, n := range []struct{ id, x, fx string }{{"a", "hx1", same}, {"b", "hx2", other}} {
		ag := agent.New(mem.Peer(n.id), noRunner{}, agent.Options{NodeID: n.id, AnnounceEvery: 10 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		hashes := map[string]string{"x": n.x, "y": "hy"}
		ag.SetSchedules([]agent.Schedule{{ID: "x", TTL: time.Minute}, {ID: "y", TTL: time.Minute}}, hashes, "config-"+n.x)
		fields := map[string]string{"x": n.fx, "y": same}
		ag.SetFieldHashes(func(id string) (string, bool) { f, ok := fields[id]; return f, ok })
		wg.Add(1)
		go func() { defer wg.Done(); ag.Run(ctx, nil) }()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		nodes, err := mem.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d := cluster.Drift(nodes)
		if len(nodes) == 2 && len(d.Schedules) == 1 && strings.Join(d.Schedules[0].Fields, ",") == "cron,job" &&
			strings.Contains(logs.String(), `drift="x: definition hx1 on a vs definition hx2 on b (cron, job differ)"`) {
			for _, n := range nodes {
				if len(n.Fields) != 1 || n.Fields["x"] == "" {
					t.Errorf("node %s announces field hashes %v, want x's only", n.NodeID, n.Fields)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("drift %+v; log:\n%s", d, logs.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the backend: nothing signals an announcement
	}
}
