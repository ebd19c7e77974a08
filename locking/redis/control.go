package redis

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/cluster"
)

// The operators' acts (cluster.Control):
//
//   - prefix{schedule}:actions, a list of action JSON, newest first,
//     trimmed to keep by the same MULTI that pushes;
//   - prefix{}:stops, one hash for the cluster's stop requests (one key:
//     no cross-slot step on Redis Cluster): field "r:<id>" is the
//     request, "<expiry µs, server clock>|<JSON>", and "n:<id>\x00<node>"
//     the runs that node stopped for it. The scripts read the server's
//     clock; the reader drops what expired.
const (
	actionsSuffix = ":actions"
	stopsSuffix   = ":stops"
)

// stopScripts: request (KEYS[1] the hash; ARGV id, ttl µs, JSON), list
// (KEYS[1]; returns field, value pairs of what lives, requests without
// their expiry) and acted (KEYS[1]; ARGV id, node, JSON: only while the
// request lives).
var (
	requestStopScript = goredis.NewScript(`local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if redis.call('HEXISTS', KEYS[1], 'r:' .. ARGV[1]) == 0 then
  redis.call('HSET', KEYS[1], 'r:' .. ARGV[1], (now + tonumber(ARGV[2])) .. '|' .. ARGV[3])
end
return 0`)
	stopListScript = goredis.NewScript(`local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local all = redis.call('HGETALL', KEYS[1])
local live, out = {}, {}
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if string.sub(f, 1, 2) == 'r:' then
    local bar = string.find(v, '|', 1, true)
    if tonumber(string.sub(v, 1, bar - 1)) > now then
      live[string.sub(f, 3)] = true
      table.insert(out, f)
      table.insert(out, string.sub(v, bar + 1))
    else
      redis.call('HDEL', KEYS[1], f)
    end
  end
end
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if string.sub(f, 1, 2) == 'n:' then
    local z = string.find(f, '\0', 3, true)
    if z and live[string.sub(f, 3, z - 1)] then
      table.insert(out, f)
      table.insert(out, v)
    else
      redis.call('HDEL', KEYS[1], f)
    end
  end
end
return out`)
	stopActedScript = goredis.NewScript(`local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local v = redis.call('HGET', KEYS[1], 'r:' .. ARGV[1])
if v and tonumber(string.sub(v, 1, string.find(v, '|', 1, true) - 1)) > now then
  redis.call('HSET', KEYS[1], 'n:' .. ARGV[1] .. '\0' .. ARGV[2], ARGV[3])
end
return 0`)
)

// RecordAction pushes a onto its schedule's actions, keeping keep.
func (l *Locker) RecordAction(ctx context.Context, a cluster.Action, keep int) error {
	if err := cluster.CheckAction(a); err != nil {
		return err
	}
	if err := cluster.CheckKeep(keep); err != nil {
		return err
	}
	if err := l.begin(ctx, "record action", a.Schedule); err != nil {
		return err
	}
	b, err := json.Marshal(cluster.BoundAction(a))
	if err != nil {
		return fmt.Errorf("locking/redis: record action %q: %w", a.Schedule, err)
	}
	key := l.lockKey(a.Schedule) + actionsSuffix
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	_, err = l.client.TxPipelined(opCtx, func(p goredis.Pipeliner) error {
		p.LPush(opCtx, key, b)
		p.LTrim(opCtx, key, 0, int64(keep-1))
		return nil
	})
	if err != nil {
		return l.opError(ctx, "record action", a.Schedule, err)
	}
	return nil
}

// Actions returns up to limit actions of schedule, newest first.
func (l *Locker) Actions(ctx context.Context, schedule string, limit int) ([]cluster.Action, error) {
	if err := cluster.CheckSchedule(schedule); err != nil {
		return nil, err
	}
	if err := cluster.CheckLimit(limit); err != nil {
		return nil, err
	}
	if err := l.begin(ctx, "actions", schedule); err != nil {
		return nil, err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	vals, err := l.client.LRange(opCtx, l.lockKey(schedule)+actionsSuffix, 0, int64(limit-1)).Result()
	if err != nil {
		return nil, l.opError(ctx, "actions", schedule, err)
	}
	out := make([]cluster.Action, 0, len(vals))
	for _, v := range vals {
		var a cluster.Action
		if err := json.Unmarshal([]byte(v), &a); err != nil {
			return nil, fmt.Errorf("locking/redis: actions %q: %w: a stored action: %w", schedule, errReply, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// RequestStop stores r, expiring after ttl (the server's clock); a resend
// keeps what is stored.
func (l *Locker) RequestStop(ctx context.Context, r cluster.StopRequest, ttl time.Duration) error {
	if err := cluster.CheckStop(r, ttl); err != nil {
		return err
	}
	if err := l.begin(ctx, "request stop", r.Schedule); err != nil {
		return err
	}
	r.Stopped = nil
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("locking/redis: request stop %q: %w", r.Schedule, err)
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	err = requestStopScript.Run(opCtx, l.client, []string{l.clusterKey(stopsSuffix)},
		r.ID, strconv.FormatInt(ttl.Microseconds(), 10), b).Err()
	if err != nil {
		return l.opError(ctx, "request stop", r.Schedule, err)
	}
	return nil
}

// StopRequests returns the live stop requests, oldest first, with what
// the nodes stopped for each.
func (l *Locker) StopRequests(ctx context.Context) ([]cluster.StopRequest, error) {
	if err := l.begin(ctx, "stop requests", ""); err != nil {
		return nil, err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	v, err := stopListScript.Run(opCtx, l.client, []string{l.clusterKey(stopsSuffix)}).StringSlice()
	if err != nil {
		return nil, l.opError(ctx, "stop requests", "", err)
	}
	if len(v)%2 != 0 {
		return nil, fmt.Errorf("locking/redis: stop requests: %w: %d values, want pairs", errReply, len(v))
	}
	byID := map[string]*cluster.StopRequest{}
	var out []*cluster.StopRequest
	acts := map[string][][2]string{} // id -> (node, JSON)
	for i := 0; i < len(v); i += 2 {
		f, val := v[i], v[i+1]
		switch {
		case strings.HasPrefix(f, "r:"):
			r := &cluster.StopRequest{}
			if err := json.Unmarshal([]byte(val), r); err != nil {
				return nil, fmt.Errorf("locking/redis: stop requests: %w: a stored request: %w", errReply, err)
			}
			r.Stopped = []cluster.Stopped{}
			byID[f[2:]] = r
			out = append(out, r)
		case strings.HasPrefix(f, "n:"):
			id, node, _ := strings.Cut(f[2:], "\x00")
			acts[id] = append(acts[id], [2]string{node, val})
		}
	}
	for id, as := range acts {
		r, ok := byID[id]
		if !ok {
			continue
		}
		slices.SortFunc(as, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
		for _, a := range as {
			var s []cluster.Stopped
			if err := json.Unmarshal([]byte(a[1]), &s); err != nil {
				return nil, fmt.Errorf("locking/redis: stop requests: %w: what %s stopped: %w", errReply, a[0], err)
			}
			r.Stopped = append(r.Stopped, s...)
		}
	}
	slices.SortStableFunc(out, func(a, b *cluster.StopRequest) int {
		return cmp.Or(a.At.Compare(b.At), strings.Compare(a.ID, b.ID))
	})
	res := make([]cluster.StopRequest, len(out))
	for i, r := range out {
		res[i] = *r
	}
	return res, nil
}

// StopActed records node's part of request id while it lives.
func (l *Locker) StopActed(ctx context.Context, id, node string, stopped []cluster.Stopped) error {
	if id == "" || node == "" {
		return fmt.Errorf("locking/redis: stop acted: %w: empty request id or node", cluster.ErrInvalid)
	}
	if err := l.begin(ctx, "stop acted", id); err != nil {
		return err
	}
	if stopped == nil {
		stopped = []cluster.Stopped{}
	}
	b, err := json.Marshal(stopped)
	if err != nil {
		return fmt.Errorf("locking/redis: stop acted %q: %w", id, err)
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	if err := stopActedScript.Run(opCtx, l.client, []string{l.clusterKey(stopsSuffix)}, id, node, b).Err(); err != nil {
		return l.opError(ctx, "stop acted", id, err)
	}
	return nil
}

// CancelQueue drops schedule's queue in one MULTI, then unindexes it.
func (l *Locker) CancelQueue(ctx context.Context, schedule string) (int, error) {
	if err := cluster.CheckSchedule(schedule); err != nil {
		return 0, err
	}
	if err := l.begin(ctx, "cancel queue", schedule); err != nil {
		return 0, err
	}
	key := l.lockKey(schedule) + requestsSuffix
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	var n *goredis.IntCmd
	_, err := l.client.TxPipelined(opCtx, func(p goredis.Pipeliner) error {
		n = p.LLen(opCtx, key)
		p.Del(opCtx, key)
		return nil
	})
	if err != nil {
		return 0, l.opError(ctx, "cancel queue", schedule, err)
	}
	// Out of the index too, as when a take empties a queue (unindex puts
	// it back if a request arrived meanwhile).
	return int(n.Val()), l.unindex(ctx, schedule)
}
