package redis

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/cluster"
)

// skipsSuffix is a schedule's skip records, next to its history in its
// hash slot: a sorted set of skip JSON scored by tick in µs, one member
// per tick (skips.lua). A key of its own, not members of the history, so
// the skips of a paused schedule never push its runs out, and Runs reads
// no skip.
const skipsSuffix = ":skips"

var (
	//go:embed skips.lua
	skipsSrc string

	skipsScript = goredis.NewScript(skipsSrc)
)

// storedSkip is a skip as stored: times as µs since the epoch (a location
// would not survive anyway, and the tick is also the member's score), its
// own type so the contract's JSON and the stored form can change apart,
// as storedRun.
type storedSkip struct {
	Schedule string `json:"schedule"`
	Tick     int64  `json:"tick"`
	Node     string `json:"node"`
	Reason   string `json:"reason"`
	Note     string `json:"note"`
	At       int64  `json:"at"`
}

// RecordSkips adds skips to their schedules' skip records: per schedule
// one skips.lua (ZADD of each skip whose tick is not there yet, then
// ZREMRANGEBYRANK to the newest keep, atomically), all schedules in one
// pipelined round trip; a Cluster client sends each script to its slot's
// node. Every skip is checked before any is sent.
func (l *Locker) RecordSkips(ctx context.Context, skips []cluster.Skip, keep int) error {
	if err := cluster.CheckKeep(keep); err != nil {
		return err
	}
	for _, k := range skips {
		if err := cluster.CheckSkip(k); err != nil {
			return err
		}
	}
	if err := l.begin(ctx, "record skips", ""); err != nil {
		return err
	}
	if len(skips) == 0 {
		return nil
	}
	// Arguments of each schedule's script, in order of first appearance:
	// keep, then score and member of each skip, in the batch's order (the
	// first of a tick is kept).
	var order []string
	args := make(map[string][]any)
	keepArg := strconv.Itoa(keep)
	for _, k := range skips {
		k = cluster.BoundSkip(k)
		b, err := json.Marshal(storedSkip{
			Schedule: k.Schedule, Tick: k.Tick.UnixMicro(), Node: k.Node,
			Reason: k.Reason, Note: k.Note, At: k.At.UnixMicro(),
		})
		if err != nil {
			return fmt.Errorf("locking/redis: record skips: encoding a skip of %q: %w", k.Schedule, err)
		}
		a, ok := args[k.Schedule]
		if !ok {
			order = append(order, k.Schedule)
			a = []any{keepArg}
		}
		// µs since the epoch are exact in a double (the score) until 2255.
		args[k.Schedule] = append(a, strconv.FormatInt(k.Tick.UnixMicro(), 10), b)
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	cmds, err := l.client.Pipelined(opCtx, func(p goredis.Pipeliner) error {
		for _, s := range order {
			// EVAL, not EVALSHA: a pipeline cannot fall back on NOSCRIPT.
			skipsScript.Eval(opCtx, p, []string{l.lockKey(s) + skipsSuffix}, args[s]...)
		}
		return nil
	})
	if err == nil {
		for _, c := range cmds {
			if _, err = replyInt(c.(*goredis.Cmd)); err != nil {
				break
			}
		}
	}
	if err != nil {
		return l.opError(ctx, "record skips", "", err)
	}
	return nil
}

// Skips returns up to limit skips of schedule, newest tick first.
func (l *Locker) Skips(ctx context.Context, schedule string, limit int) ([]cluster.Skip, error) {
	if err := cluster.CheckSchedule(schedule); err != nil {
		return nil, err
	}
	if err := cluster.CheckLimit(limit); err != nil {
		return nil, err
	}
	if err := l.begin(ctx, "skips", schedule); err != nil {
		return nil, err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	vals, err := l.client.ZRevRange(opCtx, l.lockKey(schedule)+skipsSuffix, 0, int64(limit-1)).Result()
	if err != nil {
		return nil, l.opError(ctx, "skips", schedule, err)
	}
	out := make([]cluster.Skip, 0, len(vals))
	for _, v := range vals {
		var s storedSkip
		if err := json.Unmarshal([]byte(v), &s); err != nil {
			return nil, fmt.Errorf("locking/redis: skips %q: %w: a stored skip: %w", schedule, errReply, err)
		}
		out = append(out, cluster.Skip{
			Schedule: s.Schedule, Tick: time.UnixMicro(s.Tick), Node: s.Node,
			Reason: s.Reason, Note: s.Note, At: time.UnixMicro(s.At),
		})
	}
	return out, nil
}
