package pg

import (
	"context"
	"testing"
	"time"
)

// TestFenceSurvivesForgottenWrites: fence rows are committed without
// waiting for fsync, so a crash may roll a key's fence back. The clock
// floor keeps the next fence above every one handed out before.
func TestFenceSurvivesForgottenWrites(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()

	h1 := mustLock(t, l, "job")
	if now := time.Now().UnixMicro(); h1.Fence() < now-int64(time.Hour/time.Microsecond) {
		t.Fatalf("fence %d is not floored at the database clock (now %d µs)", h1.Fence(), now)
	}
	if err := l.Release(ctx, h1); err != nil {
		t.Fatal(err)
	}
	// What a crash that lost the last fence writes leaves behind.
	if _, err := c.admin.Exec(ctx, `UPDATE bext_lock_fences SET fence = 7 WHERE namespace = $1 AND key = 'job'`, c.ns); err != nil {
		t.Fatal(err)
	}
	h2 := mustLock(t, l, "job")
	if h2.Fence() <= h1.Fence() {
		t.Fatalf("fence after the rolled-back row = %d, not above the earlier %d", h2.Fence(), h1.Fence())
	}
	if err := l.Release(ctx, h2); err != nil {
		t.Fatal(err)
	}
	// Back to back, within one microsecond or not, fences still increase.
	h3 := mustLock(t, l, "job")
	if h3.Fence() <= h2.Fence() {
		t.Fatalf("fence %d not above the previous %d", h3.Fence(), h2.Fence())
	}
}
