package jobs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// orphanParentEnv makes the test binary act as a scheduler running one
// long command job; its value is the file the job writes its pid to.
const orphanParentEnv = "BEXT_JOBS_TEST_ORPHAN_PIDFILE"

func orphanParent() {
	c := &Command{Argv: []string{"/bin/sh", "-c", `echo $$ > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE" && exec sleep 120`},
		Env: map[string]string{"PIDFILE": os.Getenv(orphanParentEnv)}}
	err := c.Run(context.Background(), scheduler.Tick{ScheduleID: "orphan", Time: time.Now(), NodeID: "n"})
	fmt.Fprintln(os.Stderr, "job ended:", err)
	os.Exit(1)
}

// The e2e cluster run found that a node killed with -9 left its job
// running: with Postgres the lock died with the node's session, the next
// tick ran elsewhere, and the two runs overlapped. A job must die with the
// process that supervises it.
func TestCommandDiesWithItsScheduler(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), orphanParentEnv+"="+pidfile)
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- parent.Wait() }()

	// The job renames its pid file into place: poll for it, bounded.
	var pid int
	deadline := time.Now().Add(30 * time.Second)
	for pid == 0 {
		if b, err := os.ReadFile(pidfile); err == nil {
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatalf("pid file: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			_ = parent.Process.Kill()
			<-exited
			t.Fatal("the job never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })

	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	deadline = time.Now().Add(10 * time.Second)
	for {
		alive, err := proctest.GroupAlive(pid)
		if err != nil {
			t.Fatal(err)
		}
		if !alive {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job (pid %d) still runs 10s after its scheduler was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
