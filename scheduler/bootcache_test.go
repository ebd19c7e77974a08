package scheduler

import (
	"testing"
	"time"
)

// fakeClocks stands for the host: boot and mono advance together, and a
// suspend moves boot and wall but not mono.
type fakeClocks struct {
	wall, mono, boot int64
	reads            int
}

func (f *fakeClocks) advance(d time.Duration) {
	f.wall += int64(d)
	f.mono += int64(d)
	f.boot += int64(d)
}

func (f *fakeClocks) suspend(d time.Duration) {
	f.wall += int64(d)
	f.boot += int64(d)
}

func newFakeCache(f *fakeClocks) *bootCache {
	return &bootCache{
		read:   func() time.Time { f.reads++; return time.Unix(0, f.boot) },
		clocks: func() (int64, int64) { return f.wall, f.mono },
	}
}

func TestBootCacheFollowsSuspendsAndClockSteps(t *testing.T) {
	f := &fakeClocks{wall: 1e18, mono: 5e9, boot: 7e9}
	c := newFakeCache(f)
	check := func(what string, wantReads int) {
		t.Helper()
		if got := c.now().UnixNano(); got != f.boot {
			t.Fatalf("%s: reading %d, want the boot clock %d", what, got, f.boot)
		}
		if f.reads != wantReads {
			t.Fatalf("%s: %d exact reads, want %d", what, f.reads, wantReads)
		}
	}
	check("first reading", 1)
	f.advance(10 * time.Millisecond)
	check("10 ms later", 1)
	f.suspend(time.Hour)
	check("after a suspend", 2)
	f.advance(time.Millisecond)
	check("after the resync", 2)
	f.wall -= int64(time.Minute) // a clock step back
	check("after a wall clock step", 3)
	f.advance(bootRefresh)
	check("a refresh period later", 4)
}

// On the host's clocks, a cached reading is never ahead of CLOCK_BOOTTIME
// and behind it by less than bootTolerance.
func TestBootCacheAgreesWithTheBootClock(t *testing.T) {
	for range 20_000 {
		before := bootTime()
		got := leaseClock.now()
		after := bootTime()
		if got.After(after) {
			t.Fatalf("cached reading %v is ahead of the boot clock read after it (%v)", got, after)
		}
		if before.Sub(got) > bootTolerance {
			t.Fatalf("cached reading %v is %v behind the boot clock read before it", got, before.Sub(got))
		}
	}
}
