package redis

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/locking"
)

// scanCount is the COUNT hint per SCAN call: large enough to list
// thousands of locks in a few round trips, small enough that each call
// stays short on a busy server.
const scanCount = 500

// List returns the locks currently held under the key prefix, for the
// `locks` command: key, fence, time left and holder, never the token. It
// walks the keyspace with SCAN (never KEYS, which blocks the server), on
// every master of a Cluster and every shard of a Ring. Each round trip is
// bounded by OpTimeout.
// The listing is a snapshot: locks may come and go while it runs.
func (l *Locker) List(ctx context.Context) ([]locking.LockInfo, error) {
	if err := l.checkOpen(); err != nil {
		return nil, err
	}
	// Everything under the prefix: locks end with '}' (prefix{key}) and
	// per-tick locks with "}:tick:" and T; scanNode drops the fence
	// counters, marks and pause flags kept next to them. One SCAN with a
	// broad pattern walks the keyspace once, where a pattern per kind
	// would walk it twice.
	match := globEscape(l.prefix) + `\{*`

	var (
		mu  sync.Mutex
		out []locking.LockInfo
	)
	scan := func(ctx context.Context, c goredis.Cmdable) error {
		infos, err := l.scanNode(ctx, c, match)
		mu.Lock()
		out = append(out, infos...)
		mu.Unlock()
		return err
	}
	// SCAN walks one server's keyspace: a sharded client is walked shard
	// by shard.
	perNode := func(ctx context.Context, c *goredis.Client) error { return scan(ctx, c) }
	var err error
	switch c := l.client.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, perNode)
	case *goredis.Ring:
		err = c.ForEachShard(ctx, perNode)
	default:
		err = scan(ctx, l.client)
	}
	if err != nil {
		return nil, l.opError(ctx, "list", "", err)
	}
	return out, nil
}

// scanNode lists the locks on one server: SCAN for lock keys, then one
// pipelined round trip per batch for their values, PTTLs and fences.
func (l *Locker) scanNode(ctx context.Context, c goredis.Cmdable, match string) ([]locking.LockInfo, error) {
	var out []locking.LockInfo
	var cursor uint64
	for {
		opCtx, cancel := l.opContext(ctx)
		keys, next, err := c.Scan(opCtx, cursor, match, scanCount).Result()
		cancel()
		if err != nil {
			return out, err
		}
		keys = l.lockKeys(keys)
		if len(keys) > 0 {
			infos, err := l.describe(ctx, c, keys)
			if err != nil {
				return out, err
			}
			out = append(out, infos...)
		}
		if next == 0 {
			return out, nil
		}
		cursor = next
	}
}

// lockKeys keeps the keys of locks and per-tick locks, in place.
func (l *Locker) lockKeys(keys []string) []string {
	out := keys[:0]
	for _, k := range keys {
		if _, ok := l.listedKey(k); ok {
			out = append(out, k)
		}
	}
	return out
}

// listedKey is the key List shows for the Redis key k: the caller's key
// for a lock (prefix{key}), locking.TickLockKey for a per-tick lock
// (prefix{key}:tick:T); ok is false for anything else (fence counters,
// marks, pause flags, foreign keys).
func (l *Locker) listedKey(k string) (key string, ok bool) {
	rest, ok := strings.CutPrefix(k, l.prefix+"{")
	if !ok {
		return "", false
	}
	if key, ok := strings.CutSuffix(rest, "}"); ok {
		return key, true
	}
	// The last "}:tick:" ends the key: the caller's key may contain one,
	// the tick's digits cannot.
	i := strings.LastIndex(rest, "}"+tickSuffix)
	if i < 0 {
		return "", false
	}
	us, err := strconv.ParseInt(rest[i+1+len(tickSuffix):], 10, 64)
	if err != nil {
		return "", false
	}
	return locking.TickLockKey(rest[:i], time.UnixMicro(us)), true
}

// fenceKey is the fence counter of the lock or per-tick lock k.
func fenceKey(k string) string {
	if strings.HasSuffix(k, "}") {
		return k + fenceSuffix
	}
	return k[:strings.LastIndex(k, "}"+tickSuffix)+1] + fenceSuffix
}

func (l *Locker) describe(ctx context.Context, c goredis.Cmdable, keys []string) ([]locking.LockInfo, error) {
	type cmds struct {
		value *goredis.StringCmd
		pttl  *goredis.DurationCmd
		fence *goredis.StringCmd
	}
	all := make([]cmds, len(keys))
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	_, err := c.Pipelined(opCtx, func(p goredis.Pipeliner) error {
		for i, k := range keys {
			all[i] = cmds{p.Get(opCtx, k), p.PTTL(opCtx, k), p.Get(opCtx, fenceKey(k))}
		}
		return nil
	})
	if err != nil && err != goredis.Nil { // Nil: a lock or fence vanished meanwhile
		return nil, err
	}
	out := make([]locking.LockInfo, 0, len(keys))
	for i, k := range keys {
		v, err := all[i].value.Result()
		if err != nil {
			continue // released between SCAN and GET
		}
		ttl := all[i].pttl.Val()
		if ttl < 0 {
			ttl = 0 // -1 no expiry (never set by us), -2 gone
		}
		// The fence the lock drew, stored with it; the counter for a
		// value written by an older version, which kept none.
		fence, ok := valueFence(v)
		if !ok {
			fence, _ = all[i].fence.Int64()
		}
		key, _ := l.listedKey(k)
		out = append(out, locking.LockInfo{
			Key:     key,
			Fence:   fence,
			TTLLeft: ttl.Round(time.Millisecond),
			Holder:  splitValue(v),
		})
	}
	return out, nil
}

// valueFence returns the fence stored in a lock's value (see lib.lua).
func valueFence(v string) (int64, bool) {
	v, _, _ = strings.Cut(v, holderSep)
	_, f, ok := strings.Cut(v, fenceSep)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(f, 10, 64)
	return n, err == nil
}

// globEscape quotes the characters SCAN MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\', '{', '}', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
