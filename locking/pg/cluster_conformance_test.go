package pg

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	store "github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cluster/clustertest"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// clusterSessions is MaxSessions of each suite store: the suite's races
// run 32 stores of one test at once, each holding at most a lock and a
// session asking, so two sessions each stay well under the server's
// max_connections (100).
const clusterSessions = 2

// TestClusterStoreConformance runs the shared cluster.Store suite: the
// stores of one suite case are Lockers of one namespace (caseCluster), the
// other cluster's a namespace of its own. The store is its own Locker.
func TestClusterStoreConformance(t *testing.T) {
	clustertest.Run(t, clusterBackend(t))
}

func clusterBackend(t testing.TB) clustertest.Backend {
	nowConn, err := pgx.Connect(context.Background(), testenv.PGURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nowConn.Close(context.Background()) })
	return clustertest.Backend{
		Parallel: true, // each case has a namespace of its own
		// A lock has no TTL: it ends with its session.
		EndLock: func(t testing.TB, _ store.Store, schedule string) { caseCluster(t).kill(schedule) },
		New: func(t testing.TB) store.Store {
			return caseCluster(t).open(Options{MaxSessions: clusterSessions})
		},
		NewOtherCluster: func(t testing.TB) store.Store {
			return newCluster(t).open(Options{MaxSessions: clusterSessions})
		},
		// The database clock, which Announce and node expiry run on.
		Now: func() time.Time {
			nowMu.Lock()
			defer nowMu.Unlock()
			var now time.Time
			if err := nowConn.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
				t.Errorf("reading the database clock: %v", err)
			}
			return now
		},
	}
}

// BenchmarkClusterStore is the shared cluster.Store benchmark
// (clustertest.Benchmark says what each measures).
func BenchmarkClusterStore(b *testing.B) {
	clustertest.Benchmark(b, clusterBackend(b))
}

// caseCluster is the cluster of a suite case: its stores share a
// namespace. The suite's case names have a slash of their own
// ("Runs/Limit"), so the whole test name is the case.
func caseCluster(t testing.TB) *cluster {
	t.Helper()
	name := t.Name()
	clustersMu.Lock()
	defer clustersMu.Unlock()
	if c, ok := clusters[name]; ok {
		return c
	}
	c := newCluster(t)
	clusters[name] = c
	t.Cleanup(func() {
		clustersMu.Lock()
		delete(clusters, name)
		clustersMu.Unlock()
	})
	return c
}
