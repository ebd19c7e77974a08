package pg

import (
	"context"
	"errors"
	"testing"
	"time"

	store "github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// A role that may read but not write is refused, and says so: the error
// is ErrPermission, never ErrUnavailable (which callers wait out).
func TestReadOnlyRoleIsPermissionDenied(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	// The tables exist, made by a role that may.
	h, err := c.open(Options{}).TryLock(ctx, "made", time.Minute)
	if err != nil || h == nil {
		t.Fatalf("TryLock as the admin = %v, %v", h, err)
	}
	ro := c.open(Options{URL: testenv.ReadOnlyPGRole(t), OpTimeout: 10 * time.Second})
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, locking.ErrPermission) || errors.Is(err, locking.ErrUnavailable) {
			t.Errorf("%s = %v; want ErrPermission, not ErrUnavailable", what, err)
		}
	}
	_, err = ro.TryLock(ctx, "k", time.Minute)
	check("TryLock", err)
	check("SetPause", ro.SetPause(ctx, "job", locking.Pause{Note: "ro"}))
	check("RecordRuns", ro.RecordRuns(ctx, []store.Run{{Schedule: "job", Tick: time.Now(), Node: "n", Result: "success", StartedAt: time.Now(), RunID: "r1", Attempts: 1}}, 10))
}
