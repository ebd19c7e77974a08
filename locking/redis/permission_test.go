package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	store "github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// An ACL user without the commands (NOPERM), or a password Redis does
// not accept (WRONGPASS), is refused, and says so: the error is
// ErrPermission, never ErrUnavailable (which callers wait out).
func TestACLRefusalIsPermissionDenied(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	prefix := testPrefix(t, adminClient(t, url))
	ro := openLocker(t, Options{URL: testenv.RedisACLUser(t, "~*", "&*", "+@read", "+@connection"), KeyPrefix: prefix, Holder: "ro"})
	ctx := context.Background()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, locking.ErrPermission) || errors.Is(err, locking.ErrUnavailable) {
			t.Errorf("%s = %v; want ErrPermission, not ErrUnavailable", what, err)
		}
	}
	_, err := ro.TryLock(ctx, "k", time.Minute)
	check("TryLock", err)
	check("SetPause", ro.SetPause(ctx, "job", locking.Pause{Note: "ro"}))
	check("RecordRuns", ro.RecordRuns(ctx, []store.Run{{Schedule: "job", Tick: time.Now(), Node: "n", Result: "success",
		StartedAt: time.Now(), RunID: "r1", Attempts: 1}}, 10))

	bad := testenv.RedisACLUser(t, "~*", "+@all")
	bad = bad[:len("redis://")] + "nobody-" + bad[len("redis://"):]
	_, err = openLocker(t, Options{URL: bad, KeyPrefix: prefix, Holder: "bad"}).TryLock(ctx, "k", time.Minute)
	check("TryLock with a wrong user", err)
}
