//go:build unix

package node

import (
	"log/slog"
	"syscall"
)

// raiseDescriptorLimit raises the soft RLIMIT_NOFILE to the hard one and
// returns the limit now in force (0 when unknown). The Go runtime already
// does so at start on most systems; setting it again would make children
// inherit the raised limit instead of the original, so it is set only when
// still below the hard limit.
func raiseDescriptorLimit(logger *slog.Logger) uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		logger.Warn("reading the descriptor limit", "err", err)
		return 0
	}
	if l.Cur < l.Max {
		from := l.Cur
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			logger.Warn("raising the descriptor limit", "soft", from, "hard", l.Max, "err", err)
			return from
		}
		logger.Info("descriptor limit raised to the hard limit", "from", from, "to", l.Max)
	}
	return l.Cur
}
