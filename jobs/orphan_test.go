package jobs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// orphanParentEnv makes the test binary act as a scheduler running one
// long command job; its value is the file the job writes its pids to.
const orphanParentEnv = "BEXT_JOBS_TEST_ORPHAN_PIDFILE"

func orphanParent() {
	c := &Command{Argv: []string{"/bin/sh", "-c", proctest.ForkingScript},
		Env: map[string]string{"PIDFILE": os.Getenv(orphanParentEnv)}}
	err := c.Run(context.Background(), scheduler.Tick{ScheduleID: "orphan", Time: time.Now(), NodeID: "n"})
	fmt.Fprintln(os.Stderr, "job ended:", err)
	os.Exit(1)
}

// The e2e cluster run found that a node killed with -9 left its job
// running: with Postgres the lock died with the node's session, the next
// tick ran elsewhere, and the two runs overlapped. A job, and everything it
// forked, also what left its process group, must die with the process that
// supervises it; a parent-death signal on the job's leader alone leaves
// the forked sleeps running.
func TestCommandDiesWithItsScheduler(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pids")
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), orphanParentEnv+"="+pidfile)
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- parent.Wait() }()
	t.Cleanup(func() {
		_ = parent.Process.Kill()
		<-exited
	})

	pids := proctest.ReadPids(t, pidfile, 30*time.Second)
	if len(pids) != 3 {
		t.Fatalf("pid file lists %v, want 3 pids", pids)
	}
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	proctest.WaitGone(t, pids, 10*time.Second)
}
