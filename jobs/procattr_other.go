//go:build !linux

package jobs

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// runGroup is a started command; see procattr_linux.go.
type runGroup struct {
	pid, pgid int
}

// startGroup starts cmd in a process group of its own. Elsewhere than
// Linux there is neither a supervisor nor a parent-death signal: a job
// outlives a scheduler killed with -9 (see procattr_linux.go).
func startGroup(cmd *exec.Cmd) (*runGroup, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &runGroup{pid: cmd.Process.Pid, pgid: cmd.Process.Pid}, nil
}

func (g *runGroup) kill() {
	signalGroup(g.pgid, syscall.SIGKILL)
	_ = unix.Kill(g.pid, unix.SIGKILL)
}

func (g *runGroup) exited() { signalGroup(g.pgid, syscall.SIGKILL) }

func (g *runGroup) release() {}
