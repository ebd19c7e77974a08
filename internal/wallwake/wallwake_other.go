//go:build !linux

package wallwake

import "time"

// Wake has no kernel wake here: New returns nil, and the loop re-reads
// the clock every few seconds.
type Wake struct{}

// New returns nil, nil: no kernel wake on this platform.
func New(time.Duration) (*Wake, error) { return nil, nil }

func (*Wake) C() <-chan struct{} { return nil }
func (*Wake) Arm(int64) error    { return nil }
func (*Wake) Disarm() error      { return nil }
func (*Wake) Failed() error      { return nil }
func (*Wake) Close()             {}
