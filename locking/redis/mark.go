package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/locking"
)

var _ locking.MarkReader = (*Locker)(nil)

// Mark reads key's tick mark (prefix{key}:mark, microseconds), as
// tick.lua and initmark.lua write it.
func (l *Locker) Mark(ctx context.Context, key string) (time.Time, bool, error) {
	if err := locking.CheckKey(key); err != nil {
		return time.Time{}, false, err
	}
	if err := l.begin(ctx, "mark", key); err != nil {
		return time.Time{}, false, err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	v, err := l.client.Get(opCtx, l.lockKey(key)+markSuffix).Result()
	if errors.Is(err, goredis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, l.opError(ctx, "mark", key, err)
	}
	us, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("locking/redis: tick mark %q: %w: %q", key, errReply, v)
	}
	return time.UnixMicro(us), true, nil
}
