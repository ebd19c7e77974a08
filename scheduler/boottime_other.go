//go:build !linux

package scheduler

import "time"

// bootTime falls back to the wall clock with its monotonic reading where
// CLOCK_BOOTTIME does not exist.
func bootTime() time.Time { return time.Now() }
