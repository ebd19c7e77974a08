package pg

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/locking"
)

var _ locking.TickWatcher = (*Locker)(nil)

// tickChannel is the channel tryLockTicksSQL tells raised marks on: one per
// cluster, that is per namespace in one bext_lock_fences table (its schema;
// notifications never leave their database). A channel is an identifier of
// at most 63 bytes, and a namespace is any text, so the channel is named by
// a hash of both (a 2^-96 chance that two clusters of one database share
// it, which would only make their nodes hear marks that are not theirs:
// keys are compared, and a mark heard is a hint, never a decision).
func tickChannel(schema, namespace string) string {
	h := sha256.New()
	h.Write([]byte(schema))
	h.Write([]byte{0})
	h.Write([]byte(namespace))
	var sum [sha256.Size]byte
	return "bext_ticks_" + hex.EncodeToString(h.Sum(sum[:0])[:12])
}

// Reconnection waits of WatchTicks: doubled after each failed attempt,
// from watchRetryMin up to watchRetryMax, back to the minimum once a
// connection listened.
const (
	watchRetryMin = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
)

// WatchTicks listens to the cluster's raised marks (locking.TickWatcher)
// until ctx ends or the Locker closes; then it returns nil. It uses one
// connection of its own, never one of the lock sessions: a listening
// connection is told notifications between its statements, and it would
// be busy waiting for them. After a dropped connection it connects again
// (waiting watchRetryMin, doubling up to watchRetryMax while Postgres does
// not answer) and calls Listening once LISTEN is in force again; marks
// raised in between were not heard. A payload that does not parse
// (another program on the channel) is ignored.
//
// The connection is checked as a lock session is (session.go): behind a
// transaction-pooling PgBouncer LISTEN would be registered on a server
// connection the pooler hands to other clients, so WatchTicks returns
// ErrTransactionPooler, as every other call of the Locker does. Behind a
// session-pooling PgBouncer it works as direct: the listening client keeps
// its server connection for its whole life (one more per node in
// default_pool_size), and when PgBouncer drops it (client_idle_timeout,
// a restart) the watch connects again; the server connection's reset
// (DISCARD ALL) unlistens, so no other client inherits the LISTEN.
func (l *Locker) WatchTicks(ctx context.Context, w locking.TickWatch) error {
	if l.isClosed() {
		return fmt.Errorf("locking/pg: watch ticks: %w", locking.ErrClosed)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(l.abort, cancel) // Close ends the watch
	defer stop()
	wait := watchRetryMin
	for ctx.Err() == nil {
		listened, err := l.listen(ctx, w)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrTransactionPooler), errors.Is(err, locking.ErrClosed):
			return fmt.Errorf("locking/pg: watch ticks: %w", err)
		case listened:
			wait = watchRetryMin
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, watchRetryMax)
	}
	return nil
}

// listen connects, LISTENs on the cluster's channel and reports what it
// hears until the connection fails or ctx ends. listened says LISTEN was
// in force (Listening was called).
func (l *Locker) listen(ctx context.Context, w locking.TickWatch) (listened bool, err error) {
	setup, cancel := l.opCtx(ctx)
	defer cancel()
	s, err := l.connect(setup)
	if err != nil {
		return false, err
	}
	defer closeConn(l, ctx, s.conn)
	if err := l.ensureSchemaConn(setup, s.conn); err != nil {
		return false, err
	}
	channel := l.channel
	if _, err := s.conn.Exec(setup, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return false, err
	}
	cancel()
	if w.Listening != nil {
		w.Listening()
	}
	for {
		n, err := s.conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if n.Channel != channel {
			continue
		}
		if m, ok := locking.ParseTickMark(n.Payload); ok && w.Mark != nil {
			w.Mark(m)
		}
	}
}
