//go:build !unix

package scheduler_test

import "time"

// processCPU is unknown here; the benchmarks then report 0.
func processCPU() time.Duration { return 0 }
