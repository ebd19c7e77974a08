// Command ledgerjob is the job every node of the cluster tests runs. It
// reads the tick from the environment bext-scheduler gives a command job,
// makes a fenced "begin" write to the shared protected resource, sleeps
// for its -sleep argument (the run's length), and makes a fenced "end"
// write. A SIGTERM (the scheduler cancelling the run, e.g. lock_lost)
// during the sleep records the run as cancelled instead.
//
//	ledgerjob -dir DIR [-sleep 3s]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/bext-dev/bext-scheduler/e2e/internal/ledger"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ledgerjob:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "", "the protected resource's directory (required)")
	sleep := flag.Duration("sleep", time.Millisecond, "how long the run lasts between its writes")
	flag.Parse()
	if *dir == "" {
		return fmt.Errorf("-dir is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	tick, err := time.Parse(time.RFC3339, os.Getenv("BEXT_TICK_TIME"))
	if err != nil {
		return fmt.Errorf("BEXT_TICK_TIME: %w", err)
	}
	var fence int64
	if v := os.Getenv("BEXT_FENCING_TOKEN"); v != "" {
		if fence, err = strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("BEXT_FENCING_TOKEN: %w", err)
		}
	}
	res := ledger.Resource{Dir: *dir}
	rec := ledger.Record{
		Schedule: os.Getenv("BEXT_SCHEDULE_ID"), Tick: tick, Node: os.Getenv("BEXT_NODE_ID"),
		Fence: fence, PID: os.Getpid(), Began: time.Now(),
	}

	rec.Event = ledger.EventBegin
	got, err := res.Write(rec)
	if err != nil {
		return err
	}
	if got.Result == ledger.Refused {
		// A stale holder stops at its first refused write, as a real
		// client of a fenced store would.
		_, err = res.Write(ledger.Record{Event: ledger.EventEnd, Schedule: rec.Schedule, Tick: tick,
			Node: rec.Node, Fence: fence, PID: rec.PID, Result: ledger.Cancelled})
		if err != nil {
			return err
		}
		return fmt.Errorf("fence %d refused at begin", fence)
	}

	timer := time.NewTimer(*sleep)
	defer timer.Stop()
	rec.Event = ledger.EventEnd
	select {
	case <-timer.C:
	case <-ctx.Done():
		rec.Result = ledger.Cancelled
	}
	got, err = res.Write(rec)
	if err != nil {
		return err
	}
	if got.Result == ledger.Refused {
		return fmt.Errorf("fence %d refused at end", fence)
	}
	return nil
}
