//go:build unix

package scheduler_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used (user + system): the
// benchmarks report it next to wall time, because on a shared machine
// wall time says more about the neighbours than about the code.
func processCPU() time.Duration {
	var r syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r); err != nil {
		return 0
	}
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}
