package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// TestDurabilityWarnings runs the start-up check against a private server
// (it is reconfigured) started without persistence.
func TestDurabilityWarnings(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t) // --save "" --appendonly no
	admin := adminClient(t, srv.URL())
	l := openLocker(t, Options{URL: srv.URL()})
	ctx := context.Background()

	check := func(want ...string) {
		t.Helper()
		w, err := l.Durability(ctx)
		if err != nil {
			t.Fatalf("Durability: %v", err)
		}
		if len(w) != len(want) {
			t.Fatalf("Durability = %q, want %d warnings naming %q", w, len(want), want)
		}
		t.Logf("warnings: %q", w)
		for i, s := range want {
			if !strings.Contains(w[i], s) {
				t.Errorf("warning %q does not name %q", w[i], s)
			}
		}
	}
	check("appendonly")

	if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	check("appendonly", "maxmemory-policy")

	if err := admin.ConfigSet(ctx, "save", "3600 1").Err(); err != nil {
		t.Fatal(err)
	}
	check("maxmemory-policy")

	if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "save", "").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	check()

	// A user who may not run CONFIG (as on managed services): a warning
	// that the settings are unchecked, not an error.
	if err := admin.Do(ctx, "ACL", "SETUSER", "noconfig", "on", ">secret", "~*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	limited := openLocker(t, Options{URL: fmt.Sprintf("redis://noconfig:secret@%s/0", srv.Addr())})
	w, err := limited.Durability(ctx)
	if err != nil || len(w) != 1 || !strings.Contains(w[0], "unchecked") {
		t.Fatalf("Durability without CONFIG = %q, %v; want one warning that the settings are unchecked", w, err)
	}

	// A server that is down is an error, not a warning.
	srv.Stop()
	if w, err := l.Durability(ctx); err == nil {
		t.Fatalf("Durability with Redis down = %q, nil; want an error", w)
	}
}
