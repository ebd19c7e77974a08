package config

import (
	"net/http"
	"os"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/hints"
)

// The defaults, all in one place. A key left out of the file gets these.
const (
	DefaultShutdownGrace = 30 * time.Second
	DefaultListen        = "127.0.0.1:9464"
	// DefaultMaxConnections is [http] max_connections: far above what
	// Prometheus, probes and operators open, far below a descriptor limit.
	DefaultMaxConnections = 256
	// MaxMaxConnections bounds [http] max_connections.
	MaxMaxConnections   = 65536
	DefaultLogLevel     = "info"
	DefaultLogFormat    = "text"
	DefaultSafetyMargin = 5 * time.Second
	DefaultMaxClockSkew = time.Second
	// DefaultHandoffDelay is [cluster] handoff_delay's default: far above a
	// backend round trip, far below max_clock_skew.
	DefaultHandoffDelay    = 250 * time.Millisecond
	DefaultRedisKeyPrefix  = "bext:lock:"
	DefaultRedisOpTimeout  = 2 * time.Second
	DefaultPGNamespace     = "bext"
	DefaultPGMaxSessions   = 16
	DefaultPGOpTimeout     = 5 * time.Second
	DefaultExpectedRuntime = time.Minute
	DefaultOverlap         = OverlapSkip
	DefaultHTTPTimeout     = 30 * time.Second
	DefaultHistoryKeep     = cluster.DefaultKeep
	// DefaultAuditEvery is [history] audit_every: a lost tick is in
	// bext_scheduler_ticks_lost within about a minute of its grace.
	DefaultAuditEvery = time.Minute
	// MaxHistoryKeep bounds [history] keep: a schedule's history costs up
	// to keep × 5 KiB in the backend, per schedule.
	MaxHistoryKeep       = 10000
	DefaultNotifyTimeout = 5 * time.Second
	// MaxNotifyTimeout is the contract's bound on a ping's timeout.
	MaxNotifyTimeout = 5 * time.Second
	// The jitter and timeout defaults are zero: no jitter, no timeout (the
	// lock's renewal keeps an overrunning job safe). The hint default is
	// hints.Default (prefer_global); node_id defaults to os.Hostname().
)

// Default returns a Config holding every top-level default and no
// schedules, for building one by hand (then call Validate).
func Default() *Config {
	c := defaultConfig()
	c.NodeID, _ = os.Hostname()
	return &c
}

// defaultConfig is the top level before the file is decoded over it, so a
// key the file sets (even to "" or "0s") wins and an absent key keeps its
// default.
func defaultConfig() Config {
	return Config{
		ShutdownGrace: Duration{DefaultShutdownGrace},
		HTTP:          HTTP{Listen: DefaultListen, MaxConnections: DefaultMaxConnections},
		History:       History{Keep: DefaultHistoryKeep, AuditEvery: Duration{DefaultAuditEvery}},
		Log:           Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
		Notify:        Notify{Timeout: Duration{DefaultNotifyTimeout}},
		Cluster:       Cluster{HandoffDelay: Duration{DefaultHandoffDelay}},
		Locking: Locking{
			SafetyMargin: Duration{DefaultSafetyMargin},
			MaxClockSkew: Duration{DefaultMaxClockSkew},
			Redis:        Redis{KeyPrefix: DefaultRedisKeyPrefix, OpTimeout: Duration{DefaultRedisOpTimeout}},
			PG: PG{Namespace: DefaultPGNamespace, MaxSessions: DefaultPGMaxSessions,
				OpTimeout: Duration{DefaultPGOpTimeout}},
		},
	}
}

// setDefaults fills what a [[scheduled]] table left out. Decoding cannot
// start from defaults here (go-toml makes each array element from zero), so
// zero means absent; Load rejects an explicit "0s" where it would matter.
func (s *Schedule) setDefaults() {
	if s.Hint == "" {
		s.Hint = string(hints.Default)
	}
	if s.Overlap == "" {
		s.Overlap = DefaultOverlap
	}
	if s.ExpectedRuntime.Duration == 0 {
		s.ExpectedRuntime.Duration = DefaultExpectedRuntime
	}
	if h := s.HTTP; h != nil {
		if h.Method == "" {
			h.Method = http.MethodGet
			if h.Body != "" {
				h.Method = http.MethodPost
			}
		}
		if h.Timeout.Duration == 0 {
			h.Timeout.Duration = DefaultHTTPTimeout
		}
	}
}
