package pg_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/pg"
)

// A node takes a job's lock, renews it while the job runs and releases it.
// Open does not connect, so it succeeds while Postgres is down; TryLock then
// reports locking.ErrUnavailable until it is back.
func Example() {
	ctx := context.Background()
	l, err := pg.Open(ctx, pg.Options{
		URL:    "postgres://scheduler@db.internal/app?sslmode=verify-full",
		Holder: "node-a/4242",
	})
	if err != nil {
		log.Fatal(err) // a bad URL (password redacted), wrapping locking.ErrInvalid
	}
	defer l.Close(ctx)

	h, err := l.TryLock(ctx, "nightly-report", 2*time.Minute)
	switch {
	case errors.Is(err, pg.ErrTransactionPooler):
		log.Fatal(err) // misconfiguration: never retry
	case err != nil:
		log.Print(err) // backend down or all sessions in use: skip this tick
		return
	case h == nil:
		return // another node runs it
	}
	// Run the job with h.Fence() as its fencing token, calling Renew about
	// every TTL/3 and stopping the job at its first error.
	if err := l.Renew(ctx, h); err != nil {
		log.Print(err) // wraps locking.ErrLockLost: stop acting as holder
		return
	}
	if err := l.Release(ctx, h); err != nil && !errors.Is(err, locking.ErrLockLost) {
		log.Print(err)
	}
}
