//go:build !linux

package scheduler

// Without a timerfd the loop keeps re-reading the wall clock every
// maxSleep (wake_linux.go says why). The methods are never called on the
// nil *wallWake that newWallWake returns; they exist so loop.go builds.

type wallWake struct{}

func newWallWake(Clock) (*wallWake, error) { return nil, nil }

func (*wallWake) C() <-chan struct{} { return nil }
func (*wallWake) arm(int64) error    { return nil }
func (*wallWake) disarm() error      { return nil }
func (*wallWake) failed() error      { return nil }
func (*wallWake) close()             {}
