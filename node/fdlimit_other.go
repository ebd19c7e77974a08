//go:build !unix

package node

import "log/slog"

// raiseDescriptorLimit: no RLIMIT_NOFILE here; 0 is "unknown".
func raiseDescriptorLimit(*slog.Logger) uint64 { return 0 }
