package redis

import (
	"context"
	"fmt"
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
	t.Parallel()
	rc := testenv.StartRedisCluster(t, 3, 0)
	addrs := make([]string, len(rc.Masters))
	for i, m := range rc.Masters {
		addrs[i] = m.Addr
	}
	url := rc.URL()
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
		// As its TTL passing would.
		EndLock: func(t testing.TB, _ cluster.Store, schedule string) {
			lk := prefixFor(t) + "{" + schedule + "}"
			if err := admin.Del(context.Background(), lk).Err(); err != nil {
				t.Fatalf("ending the lock %s: %v", lk, err)
			}
		},
	})
}
