package pg

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/locking"
)

var _ locking.MarkReader = (*Locker)(nil)

// tickMarkSQL reads a key's mark (microseconds; NULL or no row: none).
const tickMarkSQL = `SELECT tick_mark FROM bext_lock_fences WHERE namespace = $1::text AND key = $2::text`

// Mark reads key's tick mark from its row, as try-lock-tick and
// InitMarks write it.
func (l *Locker) Mark(ctx context.Context, key string) (time.Time, bool, error) {
	if err := locking.CheckKey(key); err != nil {
		return time.Time{}, false, err
	}
	var us *int64
	err := l.withTable(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		us = nil
		err := conn.QueryRow(ctx, tickMarkSQL, l.opts.Namespace, key).Scan(&us)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil || us == nil {
		return time.Time{}, false, err
	}
	return time.UnixMicro(*us), true, nil
}
