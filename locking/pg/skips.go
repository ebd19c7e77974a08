package pg

import (
	"context"
	"errors"

	store "github.com/bext-dev/bext-scheduler/cluster"
)

// RecordSkips is not built yet.
func (l *Locker) RecordSkips(ctx context.Context, skips []store.Skip, keep int) error {
	return errors.New("locking/pg: record skips: not built yet")
}

// Skips is not built yet.
func (l *Locker) Skips(ctx context.Context, schedule string, limit int) ([]store.Skip, error) {
	return nil, errors.New("locking/pg: skips: not built yet")
}
