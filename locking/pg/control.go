package pg

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	store "github.com/bext-dev/bext-scheduler/cluster"
)

// RecordAction stores a and trims its schedule's actions to keep, in one
// statement (recordActionSQL).
func (l *Locker) RecordAction(ctx context.Context, a store.Action, keep int) error {
	if err := store.CheckAction(a); err != nil {
		return err
	}
	if err := store.CheckKeep(keep); err != nil {
		return err
	}
	b, err := json.Marshal(store.BoundAction(a))
	if err != nil {
		return fmt.Errorf("locking/pg: record action %q: %w", a.Schedule, err)
	}
	return l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, recordActionSQL, l.opts.Namespace, a.Schedule, string(b), int64(keep))
		return err
	})
}

// Actions returns up to limit actions of schedule, newest first.
func (l *Locker) Actions(ctx context.Context, schedule string, limit int) ([]store.Action, error) {
	if err := store.CheckSchedule(schedule); err != nil {
		return nil, err
	}
	if err := store.CheckLimit(limit); err != nil {
		return nil, err
	}
	var out []store.Action
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, actionsSQL, l.opts.Namespace, schedule, int64(limit))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Action, error) {
			var b []byte
			var a store.Action
			if err := row.Scan(&b); err != nil {
				return a, err
			}
			return a, json.Unmarshal(b, &a)
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RequestStop stores r until ttl from now on the database clock; a resend
// keeps the stored one.
func (l *Locker) RequestStop(ctx context.Context, r store.StopRequest, ttl time.Duration) error {
	if err := store.CheckStop(r, ttl); err != nil {
		return err
	}
	r.Stopped = nil
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("locking/pg: request stop %q: %w", r.Schedule, err)
	}
	return l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, requestStopSQL, l.opts.Namespace, r.ID, ttl.Microseconds(), string(b))
		return err
	})
}

// StopRequests returns the live stop requests, oldest first.
func (l *Locker) StopRequests(ctx context.Context) ([]store.StopRequest, error) {
	var out []store.StopRequest
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		out = out[:0]
		rows, err := conn.Query(ctx, stopRequestsSQL, l.opts.Namespace)
		if err != nil {
			return err
		}
		var req, acted []byte
		_, err = pgx.ForEachRow(rows, []any{&req, &acted}, func() error {
			var r store.StopRequest
			if err := json.Unmarshal(req, &r); err != nil {
				return fmt.Errorf("a stored stop request: %w", err)
			}
			var by map[string][]store.Stopped
			if err := json.Unmarshal(acted, &by); err != nil {
				return fmt.Errorf("what the nodes stopped for %q: %w", r.ID, err)
			}
			r.Stopped = []store.Stopped{}
			for _, node := range slices.Sorted(maps.Keys(by)) {
				r.Stopped = append(r.Stopped, by[node]...)
			}
			out = append(out, r)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b store.StopRequest) int {
		return cmp.Or(a.At.Compare(b.At), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// StopActed records node's part of request id while it lives.
func (l *Locker) StopActed(ctx context.Context, id, node string, stopped []store.Stopped) error {
	if id == "" || node == "" {
		return fmt.Errorf("locking/pg: stop acted: %w: empty request id or node", store.ErrInvalid)
	}
	if stopped == nil {
		stopped = []store.Stopped{}
	}
	b, err := json.Marshal(stopped)
	if err != nil {
		return fmt.Errorf("locking/pg: stop acted %q: %w", id, err)
	}
	return l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, stopActedSQL, l.opts.Namespace, id, node, string(b))
		return err
	})
}

// CancelQueue deletes schedule's queued requests.
func (l *Locker) CancelQueue(ctx context.Context, schedule string) (int, error) {
	if err := store.CheckSchedule(schedule); err != nil {
		return 0, err
	}
	var n int64
	err := l.withCluster(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, cancelQueueSQL, l.opts.Namespace, schedule).Scan(&n)
	})
	return int(n), err
}
