package redis

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cluster/clustertest"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// TestClusterConformanceRedisCluster runs the cluster suite on a private
// three-master Redis Cluster: the history, queue and lock of a schedule
// share its slot, LastRuns and RecordRuns pipeline across slots (nodes),
// and prefix{} keys live wherever their own hash sends them.
func TestClusterConformanceRedisCluster(t *testing.T) {
	addrs := startRedisCluster(t, 3)
	url := "redis://" + strings.Join(addrs, ",")
	admin := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = admin.Close() })
	var n atomic.Int64
	prefixes := map[string]string{}
	prefixFor := func(t testing.TB) string {
		// Subtests of one case share the case's prefix; the server is
		// thrown away at the end, so nothing is cleaned up.
		name := t.Name()
		if p, ok := prefixes[name]; ok {
			return p
		}
		p := fmt.Sprintf("bext:cl:%d:", n.Add(1))
		prefixes[name] = p
		return p
	}
	open := func(t testing.TB, prefix string) cluster.Store {
		l, err := Open(Options{URL: url, KeyPrefix: prefix, Holder: "conformance", OpTimeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if _, ok := l.client.(*goredis.ClusterClient); !ok {
			t.Fatalf("Open(%s) made a %T, want a Cluster client", url, l.client)
		}
		return l
	}
	clustertest.Run(t, clustertest.Backend{
		New: func(t testing.TB) cluster.Store { return open(t, prefixFor(t)) },
		NewOtherCluster: func(t testing.TB) cluster.Store {
			return open(t, fmt.Sprintf("bext:cl:%d:", n.Add(1)))
		},
		Now: func() time.Time {
			now, err := admin.Time(context.Background()).Result()
			if err != nil {
				t.Fatalf("TIME: %v", err)
			}
			return now
		},
	})
}

// startRedisCluster starts masters private redis-servers in cluster mode,
// splits the slots between them, joins them and waits until every one
// reports the cluster ok. It returns their addresses.
func startRedisCluster(t *testing.T, masters int) []string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("this test runs its own redis-servers and cannot find one (apt-get install redis-server): %v", err)
	}
	ctx := context.Background()
	addrs := make([]string, masters)
	clients := make([]*goredis.Client, masters)
	for i := range masters {
		port := testenv.FreePort(t)
		dir := t.TempDir()
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--save", "", "--appendonly", "no", "--dir", dir)
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting redis-server: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		addrs[i] = "127.0.0.1:" + strconv.Itoa(port)
		clients[i] = goredis.NewClient(&goredis.Options{Addr: addrs[i]})
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	const slots = 16384
	for i, c := range clients {
		if err := waitFor(func() error { return c.Ping(ctx).Err() }); err != nil {
			t.Fatalf("redis-server %s does not answer: %v", addrs[i], err)
		}
		lo, hi := i*slots/masters, (i+1)*slots/masters-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE on %s: %v", addrs[i], err)
		}
	}
	for _, a := range addrs[1:] {
		host, port, _ := strings.Cut(a, ":")
		if err := clients[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			t.Fatalf("CLUSTER MEET %s: %v", a, err)
		}
	}
	for i, c := range clients {
		err := waitFor(func() error {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", masters)) {
				return fmt.Errorf("not formed yet: %s", info)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("the cluster did not form on %s: %v", addrs[i], err)
		}
	}
	return addrs
}

// waitFor polls f until it succeeds or 20 s have passed: a server cannot
// tell us when it is up or when the cluster has formed; we ask it.
func waitFor(f func() error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
