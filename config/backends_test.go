package config

import (
	"github.com/bext-dev/bext-scheduler/locking/pg"
	"github.com/bext-dev/bext-scheduler/locking/redis"
)

// The config's tests validate backend URLs as the binary does: with the
// backends' own parsers, which internal/service sets for it (config's
// non-test code imports no backend).
func init() { registerBackendURLChecks() }

func registerBackendURLChecks() {
	SetURLCheck(BackendRedis, redis.CheckURL)
	SetURLCheck(BackendPG, pg.CheckURL)
}
