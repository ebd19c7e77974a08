package redis

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cluster/clustertest"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// clusterBackend is the suite's view of Redis: Lockers made within one
// (sub)test share a key prefix (nodes of one cluster); another cluster is
// another prefix on the same server. The store is its own Locker.
func clusterBackend(t testing.TB) clustertest.Backend {
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	var mu sync.Mutex
	prefixes := map[string]string{}
	prefixFor := func(t testing.TB) string {
		mu.Lock()
		defer mu.Unlock()
		for name := t.Name(); ; {
			if p, ok := prefixes[name]; ok {
				return p
			}
			i := strings.LastIndex(name, "/")
			if i < 0 {
				break
			}
			name = name[:i]
		}
		p := testPrefix(t, admin)
		prefixes[t.Name()] = p
		return p
	}
	open := func(t testing.TB, prefix string) cluster.Store {
		// A long OpTimeout: 32 racing lockers dialling at once under -race
		// on a loaded 2-core machine; the fault tests prove the bounds.
		l, err := Open(Options{URL: url, KeyPrefix: prefix, Holder: "conformance", OpTimeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return l
	}
	return clustertest.Backend{
		Parallel:        true, // each case has a key prefix of its own
		New:             func(t testing.TB) cluster.Store { return open(t, prefixFor(t)) },
		NewOtherCluster: func(t testing.TB) cluster.Store { return open(t, testPrefix(t, admin)) },
		// Node TTLs run on the server's clock.
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
	}
}

func TestClusterConformance(t *testing.T) {
	t.Parallel()
	clustertest.Run(t, clusterBackend(t))
}

func BenchmarkClusterStore(b *testing.B) {
	clustertest.Benchmark(b, clusterBackend(b))
}
