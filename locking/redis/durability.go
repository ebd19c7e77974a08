package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// Durability checks the server settings the lock and the tick mark rely on
// (DESIGN.md, "Rules of the mark": durable where it matters) and returns
// one warning per setting that puts them at risk, naming it:
//
//   - persistence off (appendonly no and save ""): a restart forgets every
//     lock (a second holder) and every mark (the floor and the fence clock
//     bound the damage, but a tick decided only by another node can run
//     again);
//   - maxmemory-policy other than noeviction: under memory pressure Redis
//     may evict a lock (a second holder) or a mark (a second run).
//
// A server that refuses CONFIG (renamed away, or an ACL without it, as
// managed services do) is one warning saying the settings are unchecked,
// not an error. err is set only when the server cannot be reached. On a
// Cluster every master is checked and warnings name the node.
func (l *Locker) Durability(ctx context.Context) (warnings []string, err error) {
	if err := l.checkOpen(); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	check := func(ctx context.Context, c goredis.Cmdable, node string) error {
		w, err := l.durability(ctx, c, node)
		mu.Lock()
		warnings = append(warnings, w...)
		mu.Unlock()
		return err
	}
	switch c := l.client.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
			return check(ctx, n, n.Options().Addr)
		})
	default:
		err = check(ctx, l.client, "")
	}
	if err != nil {
		return warnings, l.opError(ctx, "durability check", "", err)
	}
	return warnings, nil
}

// durability checks one server.
func (l *Locker) durability(ctx context.Context, c goredis.Cmdable, node string) ([]string, error) {
	at := ""
	if node != "" {
		at = " on " + node
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	// One round trip; CONFIG GET takes one pattern per call before Redis 7.
	var aof, save, policy *goredis.MapStringStringCmd
	_, err := c.Pipelined(opCtx, func(p goredis.Pipeliner) error {
		aof = p.ConfigGet(opCtx, "appendonly")
		save = p.ConfigGet(opCtx, "save")
		policy = p.ConfigGet(opCtx, "maxmemory-policy")
		return nil
	})
	if err != nil {
		if rerr := goredis.Error(nil); errors.As(err, &rerr) {
			// The server answered, refusing CONFIG: say what we could not check.
			return []string{fmt.Sprintf("locking/redis%s: cannot read CONFIG (%v): persistence (appendonly, save) and maxmemory-policy are unchecked; "+
				"locks and tick marks need persistence on and maxmemory-policy noeviction", at, err)}, nil
		}
		return nil, err
	}
	var out []string
	a, s := aof.Val()["appendonly"], save.Val()["save"]
	if a != "yes" && strings.TrimSpace(s) == "" {
		out = append(out, fmt.Sprintf("locking/redis%s: persistence is off (appendonly %q, save %q): a restart loses every lock and tick mark; "+
			"set appendonly yes (or a save schedule) for them to survive restarts", at, a, s))
	}
	if p := policy.Val()["maxmemory-policy"]; p != "noeviction" {
		out = append(out, fmt.Sprintf("locking/redis%s: maxmemory-policy is %q: under memory pressure Redis may evict a lock (a second holder) or a tick mark (a second run); "+
			"set maxmemory-policy noeviction", at, p))
	}
	return out, nil
}
