package node

import (
	"log/slog"
	"net"
	"strings"

	"github.com/bext-dev/bext-scheduler/config"
)

// httpConnCap is how many HTTP connections the node serves at once: [http]
// max_connections, lowered to half the descriptor limit so that a flood of
// connections always leaves the other half to jobs (each command job holds
// a few pipes and a supervisor), backend connections and logs. An unknown
// limit (0) leaves max_connections as it is.
func httpConnCap(maxConns int, limit uint64) int {
	if limit == 0 {
		return maxConns
	}
	half := max(int(min(limit/2, uint64(config.MaxMaxConnections))), 1)
	return min(maxConns, half)
}

// isLoopback reports whether a listen address is reachable from this host
// only: localhost or a loopback address. An empty host is every interface.
func isLoopback(listen string) bool {
	h, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// warnOpenReads says, once at start, that anyone reaching addr reads the
// API and the page: its schedules, commands' ids, history and nodes.
func warnOpenReads(logger *slog.Logger, h config.HTTP, addr string) {
	if h.ReadToken != "" || isLoopback(h.Listen) {
		return
	}
	logger.Warn("the API and status page are open to anyone who reaches "+addr+": set [http] read_token (for example read_token = \"${BEXT_API_READ_TOKEN}\")",
		"addr", addr)
}
