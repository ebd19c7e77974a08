package pg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	store "github.com/bext-dev/bext-scheduler/cluster"
)

// RecordSkips stores skips in one statement (recordSkipsSQL): one round
// trip whatever the batch size, one row per schedule and tick (the first
// recorded stays), with the trim of any schedule's skips that grew past
// keep plus a tenth in that same statement. Every skip is checked before
// any is sent. Times are kept to the nanosecond.
func (l *Locker) RecordSkips(ctx context.Context, skips []store.Skip, keep int) error {
	if err := store.CheckKeep(keep); err != nil {
		return err
	}
	for _, k := range skips {
		if err := store.CheckSkip(k); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("locking/pg: record skips: %w", err)
	}
	if len(skips) == 0 {
		return nil
	}
	n := len(skips)
	var (
		schedules = make([]string, n)
		ticks     = make([]int64, n)
		nodes     = make([]string, n)
		reasons   = make([]string, n)
		notes     = make([]string, n)
		ats       = make([]int64, n)
	)
	for i, k := range skips {
		k = store.BoundSkip(k)
		schedules[i], ticks[i], nodes[i] = k.Schedule, unixNano(k.Tick), k.Node
		reasons[i], notes[i], ats[i] = k.Reason, k.Note, unixNano(k.At)
	}
	// Planned on each call, as recordRunsSQL: the trim's plan depends on
	// the table's size.
	args := []any{pgx.QueryExecModeExec, l.opts.Namespace, int64(keep), trimThreshold(keep),
		schedules, ticks, nodes, reasons, notes, ats}
	return l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var ins, del int64
		return conn.QueryRow(ctx, recordSkipsSQL, args...).Scan(&ins, &del)
	})
}

// Skips returns up to limit skips of schedule, newest tick first.
func (l *Locker) Skips(ctx context.Context, schedule string, limit int) ([]store.Skip, error) {
	if err := store.CheckSchedule(schedule); err != nil {
		return nil, err
	}
	if err := store.CheckLimit(limit); err != nil {
		return nil, err
	}
	var out []store.Skip
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, skipsSQL, l.opts.Namespace, schedule, int64(limit))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Skip, error) {
			var k store.Skip
			var tick, at int64
			if err := row.Scan(&k.Schedule, &tick, &k.Node, &k.Reason, &k.Note, &at); err != nil {
				return store.Skip{}, err
			}
			k.Tick, k.At = fromUnixNano(tick), fromUnixNano(at)
			return k, nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
