package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
	"github.com/bext-dev/bext-scheduler/locking/redis"
)

// A job guarded by a Redis lock: contention and backend errors are told
// apart, the fence goes along with the job's writes, and a failed renewal
// stops the job. (Compiled, not run: it needs a Redis.)
func ExampleOpen() {
	l, err := redis.Open(redis.Options{
		URL:    "redis://127.0.0.1:6379/0",
		Holder: "node-a pid 4242",
	})
	if err != nil {
		log.Fatal(err) // a malformed URL; Open does not connect
	}
	defer l.Close(context.Background())

	ctx := context.Background()
	h, err := l.TryLock(ctx, "nightly-report", 2*time.Minute)
	switch {
	case errors.Is(err, locking.ErrUnavailable):
		log.Printf("backend down, skipping: %v", err)
		return
	case err != nil:
		log.Fatal(err)
	case h == nil:
		fmt.Println("another node runs it")
		return
	}
	fmt.Println("running with fencing token", h.Fence())
	if err := l.Renew(ctx, h); err != nil {
		log.Printf("lost the lock, stopping: %v", err)
		return
	}
	if err := l.Release(ctx, h); err != nil {
		log.Printf("release: %v", err)
	}
}
