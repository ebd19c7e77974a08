package redis

import (
	"context"
	"errors"

	"github.com/bext-dev/bext-scheduler/cluster"
)

// RecordSkips is not built yet.
func (l *Locker) RecordSkips(ctx context.Context, skips []cluster.Skip, keep int) error {
	return errors.New("locking/redis: record skips: not built yet")
}

// Skips is not built yet.
func (l *Locker) Skips(ctx context.Context, schedule string, limit int) ([]cluster.Skip, error) {
	return nil, errors.New("locking/redis: skips: not built yet")
}
