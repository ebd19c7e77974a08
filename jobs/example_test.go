package jobs_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/bext-dev/bext-scheduler/jobs"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// A command job sees its tick in its environment, and each line it prints
// becomes one log record tagged with the schedule, the tick and the stream.
func ExampleCommand() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // keep the example's output stable
			}
			return a
		},
	}))
	job := &jobs.Command{
		// The operator wrote the shell; without one, argv runs as is.
		Argv:   []string{"/bin/sh", "-c", `echo "fence $BEXT_FENCING_TOKEN for $BEXT_TICK_TIME"; exit 3`},
		Logger: logger,
	}
	tick := scheduler.Tick{
		ScheduleID: "nightly-report", Time: time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC),
		NodeID: "node-a", LockKey: "nightly-report", FencingToken: 7,
	}
	err := job.Run(context.Background(), tick)
	fmt.Println(err)
	// Output:
	// level=INFO msg="job output" schedule=nightly-report tick=2026-11-30T03:00:00.000Z stream=stdout line="fence 7 for 2026-11-30T03:00:00Z"
	// jobs: command "/bin/sh" exited with code 3
}
