//go:build !bexttest

package service

import "github.com/bext-dev/bext-scheduler/scheduler"

// Clock returns the scheduler's clock: the real one. This build has no
// test hooks; TestClockOffsetEnv is not read.
func Clock() (scheduler.Clock, error) {
	return scheduler.RealClock(), nil
}
