//go:build !linux

package pg

import (
	"syscall"
	"time"
)

// userTimeoutControl is a no-op where TCP_USER_TIMEOUT does not exist; the
// keepalives and OpTimeout still bound how long a dead peer goes unnoticed.
func userTimeoutControl(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
