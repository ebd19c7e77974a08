package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/locking/memory"
)

// TryLock answers in three ways, and callers branch on all three: a handle
// (run the job), no handle and no error (someone else runs it: skip, retry
// later), or an error (the backend or the request is broken: alert).
func Example() {
	ctx := context.Background()
	node := memory.New(memory.WithHolder("node-a"))
	defer node.Close(ctx)

	for _, key := range []string{"nightly-report", "nightly-report", ""} {
		h, err := node.TryLock(ctx, key, time.Minute)
		switch {
		case err != nil:
			fmt.Println("error:", err)
		case h == nil:
			fmt.Printf("%s: contended, skip this tick\n", key)
		default:
			// Pass h.Fence() along with every write the job makes.
			fmt.Printf("%s: held, run the job\n", h.Key())
			defer node.Release(ctx, h)
		}
	}
	// Output:
	// nightly-report: held, run the job
	// nightly-report: contended, skip this tick
	// error: locking/memory: try-lock: locking: invalid argument: empty key
}
