//go:build bexttest

package service

import (
	"fmt"
	"os"
	"time"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// Clock returns the scheduler's clock: the real one, offset when
// TestClockOffsetEnv is set. Only test builds (-tags bexttest) have this.
func Clock() (scheduler.Clock, error) {
	v := os.Getenv(TestClockOffsetEnv)
	if v == "" {
		return scheduler.RealClock(), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", TestClockOffsetEnv, v, err)
	}
	return scheduler.OffsetClock(scheduler.RealClock(), d), nil
}
