// Package service holds the pieces a node is built of, shared by the
// composition root (package node) and the CLI's other commands: it opens
// the lock backend, builds the jobs and schedules from a config, and
// builds the logger the config asks for.
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/jobs"
	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/memory"
	"github.com/bext-dev/bext-scheduler/locking/pg"
	"github.com/bext-dev/bext-scheduler/locking/redis"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The config validates a backend's URL with the backend's own parser, so
// that `validate` accepts only the URLs OpenBackend accepts; config imports
// no backend, so the checks are set here, by the package that opens them.
func init() {
	config.SetURLCheck(config.BackendRedis, redis.CheckURL)
	config.SetURLCheck(config.BackendPG, pg.CheckURL)
}

// ErrBackend wraps failures to set up the lock backend from the config.
var ErrBackend = errors.New("service: lock backend")

// Backend is an opened lock backend.
type Backend struct {
	Name   string // "memory", "redis", "pg"; "" when none is configured
	Kind   hints.Backend
	Locker locking.Locker // nil when none is configured
}

// Holder names this process in lock listings: node id and pid.
func Holder(nodeID string) string {
	return nodeID + "/pid " + strconv.Itoa(os.Getpid())
}

// OpenBackend opens the configured lock backend. It never waits for the
// backend to answer: a node starts while Redis or Postgres is down, reports
// not ready, and recovers by itself. Errors are configuration mistakes
// (bad URL) and wrap ErrBackend.
func OpenBackend(ctx context.Context, cfg *config.Config, logger *slog.Logger) (Backend, error) {
	l := cfg.Locking
	holder := Holder(cfg.NodeID)
	switch l.Backend {
	case "":
		return Backend{Kind: hints.None}, nil
	case "memory":
		return Backend{Name: "memory", Kind: hints.Local, Locker: memory.New(memory.WithHolder(holder))}, nil
	case "redis":
		// go-redis logs dial failures through a process-wide logger straight
		// to stderr; route them into ours, at debug: the scheduler already
		// reports every failed lock operation as a warning with its cause.
		goredis.SetLogger(redisLog{logger})
		lk, err := redis.Open(redis.Options{
			URL: l.Redis.URL, KeyPrefix: l.Redis.KeyPrefix,
			OpTimeout: l.Redis.OpTimeout.Duration, Holder: holder,
		})
		if err != nil {
			return Backend{}, fmt.Errorf("%w: redis: %w", ErrBackend, err)
		}
		return Backend{Name: "redis", Kind: hints.Distributed, Locker: lk}, nil
	case "pg":
		lk, err := pg.Open(ctx, pg.Options{
			URL: l.PG.URL, Namespace: l.PG.Namespace, MaxSessions: l.PG.MaxSessions,
			OpTimeout: l.PG.OpTimeout.Duration, Holder: holder,
		})
		if err != nil {
			return Backend{}, fmt.Errorf("%w: pg: %w", ErrBackend, err)
		}
		return Backend{Name: "pg", Kind: hints.Distributed, Locker: lk}, nil
	}
	return Backend{}, fmt.Errorf("%w: unknown backend %q", ErrBackend, l.Backend)
}

// WarnDurability logs each setting of b that can lose a lock or a tick
// mark (Redis: persistence off, an eviction policy): an evicted lock is a
// second holder, an evicted mark a second run. A node calls it once at
// start, and only a node: the CLI's commands (lock run from a crontab
// line on every host, status, ...) stay quiet, or cron would mail the
// warning every night from every host. It delays the start by a second
// at most: a Redis that is down is reported by the lock operations, and
// the node must start without it.
func WarnDurability(ctx context.Context, b Backend, logger *slog.Logger) {
	lk, ok := b.Locker.(*redis.Locker)
	if !ok {
		return // Postgres keeps what it commits; memory keeps nothing anyway
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	warnings, err := lk.Durability(ctx)
	if err != nil {
		logger.Debug("redis durability not checked", "error", err)
		return
	}
	for _, w := range warnings {
		logger.Warn("redis may lose locks or tick marks: " + w)
	}
}

// redisLog adapts slog to go-redis's logger interface.
type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	if r.l.Enabled(ctx, slog.LevelDebug) {
		r.l.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
	}
}

// SameBackend reports whether two configs name the same lock backend, so a
// reload can keep the open one (changing backends needs a restart: locks
// held on the old one must not be dropped behind a running job's back).
func SameBackend(a, b *config.Config) bool {
	return a.Locking.Backend == b.Locking.Backend &&
		a.Locking.Redis == b.Locking.Redis && a.Locking.PG == b.Locking.PG
}

// Schedules builds the scheduler's schedules from the config's. Schedules
// whose jobs are equal share one job value, and equal cron expressions one
// string (see sharer). goJobs supplies the jobs of schedules marked GoJob
// (an embedding program's functions, node.Options.Jobs), by id.
func Schedules(cfg *config.Config, logger *slog.Logger, goJobs map[string]scheduler.Job) []scheduler.Schedule {
	out := make([]scheduler.Schedule, 0, len(cfg.Scheduled))
	mask := Masker(cfg)
	sh := newSharer()
	for i := range cfg.Scheduled {
		s := &cfg.Scheduled[i]
		job := Job(s, logger)
		if s.GoJob {
			job = goJobs[s.ID]
		}
		if c, ok := job.(*jobs.Command); ok {
			c.Mask = mask
			if s.HintValue != hints.NodeLocal {
				// A job cancelled because its lease ran out has the safety
				// margin left before another node may hold the lock: its
				// SIGTERM→SIGKILL grace must end well within it.
				c.KillGrace = min(jobs.DefaultKillGrace, max(cfg.Locking.SafetyMargin.Duration/2, time.Second))
			}
		}
		catchup := s.Catchup()
		if catchup == config.NoCatchup {
			catchup = scheduler.NoCatchup
		}
		out = append(out, scheduler.Schedule{
			ID:              s.ID,
			Spec:            s.Spec,
			CronExpr:        sh.expr(s.Cron),
			Location:        s.Location,
			Hint:            s.HintValue,
			ExpectedRuntime: s.ExpectedRuntime.Duration,
			MinRuntime:      s.MinRuntime.Duration,
			Jitter:          s.Jitter.Duration,
			Timeout:         s.Timeout.Duration,
			Overlap:         scheduler.Overlap(s.Overlap),
			CatchupWindow:   catchup,
			// s.Spec already carries the spread offset (config resolves
			// it); Spread is for display and must not be applied again.
			Spread:             s.Spread.Duration,
			Retries:            s.Retries,
			RetryBackoff:       s.RetryBackoff.Duration,
			PauseAfterFailures: s.PauseAfterFailures,
			Nodes:              s.Nodes,
			Group:              s.Group,
			GroupMax:           s.GroupMax,
			GroupWait:          s.GroupWait,
			Job:                sh.job(job),
		})
	}
	return out
}

// Job builds the job a config schedule declares (nil for a GoJob: the
// program supplies it).
func Job(s *config.Schedule, logger *slog.Logger) scheduler.Job {
	if s.GoJob {
		return nil
	}
	if s.HTTP != nil {
		return &jobs.HTTP{
			URL: s.HTTP.URL, Method: s.HTTP.Method, Headers: s.HTTP.Headers, Body: s.HTTP.Body,
			Timeout: s.HTTP.Timeout.Duration, SuccessCodes: s.HTTP.SuccessCodes,
		}
	}
	return &jobs.Command{Argv: s.Command, Dir: s.Dir, Env: s.Env, Logger: logger,
		BaseEnv: jobs.EnvPolicy{Clean: s.EnvMode == config.EnvClean, Allow: s.EnvAllow, Mask: s.EnvMask}}
}

// Logger builds the logger the config's [log] asks for, writing to w
// (stderr when nil).
func Logger(w io.Writer, lc config.Log) *slog.Logger {
	if w == nil {
		w = os.Stderr
	}
	var level slog.Level
	switch strings.ToLower(lc.Level) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if strings.ToLower(lc.Format) == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// CloseBackend closes l (nil: nothing) on a fresh context of its own: it
// runs at shutdown, once the run's context is already cancelled, and gives
// every lock back.
func CloseBackend(l locking.Locker, logger *slog.Logger) {
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		logger.Error("closing the lock backend", "err", err)
	}
}
