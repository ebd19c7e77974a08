package scheduler

import (
	"sync/atomic"
	"time"
)

// The lease clock without a system call per reading.
//
// CLOCK_BOOTTIME has no vDSO path in Go: each reading was a system call,
// and a tick reads the lease clock at least twice (the lock's send time,
// the check before the job starts). In a burst of 10,000 ticks those
// calls were a sixth of the CPU. Yet BOOTTIME differs from the monotonic
// clock (which Go reads cheaply) only by the time the host spent
// suspended, and a resume moves the wall clock by exactly that time too.
// So one exact reading serves until the wall clock moves against the
// monotonic one (a suspend, or a clock step: both resync), or for
// bootRefresh at most; in between, readings are the exact one plus the
// monotonic time since. They are never ahead of the true BOOTTIME, and
// behind it by at most bootTolerance (a suspend shorter than that, seen
// before the next resync), far below the safety margin every lease keeps.

const (
	bootTolerance = time.Millisecond
	bootRefresh   = 100 * time.Millisecond
)

type bootCache struct {
	read   func() time.Time          // the exact clock (a system call)
	clocks func() (wall, mono int64) // the cheap clocks, in ns
	last   atomic.Pointer[bootSync]
}

type bootSync struct {
	boot     time.Time // an exact reading
	mono     int64     // the monotonic clock just after it
	wallMono int64     // the wall clock minus the monotonic one then
}

// monoRef anchors the monotonic readings of the process-wide cache.
var monoRef = time.Now()

func monoClocks() (wall, mono int64) {
	n := time.Now()
	return n.UnixNano(), int64(n.Sub(monoRef))
}

// leaseClock is the real lease clock: bootTime, cached.
var leaseClock = &bootCache{read: bootTime, clocks: monoClocks}

func (c *bootCache) now() time.Time {
	if b, ok := c.cached(c.clocks()); ok {
		return b
	}
	return c.sync()
}

// at is now for a reading n of the real clock taken by the caller (c must
// be leaseClock, on monoClocks): the lease clock at that instant, without
// reading the clock again while the cache serves.
func (c *bootCache) at(n time.Time) time.Time {
	if b, ok := c.cached(n.UnixNano(), int64(n.Sub(monoRef))); ok {
		return b
	}
	return c.sync()
}

// cached derives the lease clock from the cheap clocks' readings, if the
// last exact reading still serves.
func (c *bootCache) cached(wall, mono int64) (time.Time, bool) {
	if s := c.last.Load(); s != nil {
		d := mono - s.mono
		drift := wall - mono - s.wallMono
		if d >= 0 && d < int64(bootRefresh) && drift <= int64(bootTolerance)/2 && drift >= -int64(bootTolerance)/2 {
			return s.boot.Add(time.Duration(d)), true
		}
	}
	return time.Time{}, false
}

// sync reads the exact clock, and keeps the reading if it was quick.
func (c *bootCache) sync() time.Time {
	_, before := c.clocks()
	b := c.read()
	wall, mono := c.clocks()
	// b was read somewhere between before and mono: anchored at mono, the
	// readings derived from it are behind by at most that gap. A slow
	// read (preempted) is not kept.
	if mono-before <= int64(bootTolerance)/2 {
		c.last.Store(&bootSync{boot: b, mono: mono, wallMono: wall - mono})
	}
	return b
}
