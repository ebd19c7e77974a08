package jobs

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/bext-dev/bext-scheduler/internal/supervise"
)

// runGroup is a started command: the process Run waits for and the
// process group it signals.
type runGroup struct {
	pid  int // the supervisor, or the command itself when unsupervised
	pgid int // the command's process group
	proc *supervise.Proc
}

// startGroup starts cmd in a process group of its own that dies with this
// process. Under a supervisor (Supervise was called) that holds for the
// command's whole tree: a scheduler killed with -9 leaves no job running
// unsupervised while the lock it ran under is gone (at once with
// Postgres, whose session dies with the process; after the TTL with
// Redis), and another node starts the next run.
//
// Without one, the kernel SIGKILLs the group's leader only (a parent-death
// signal), so what it forked lives on. Linux sends that signal when the
// thread that forked the child ends; Go ends a thread only when a
// goroutine locked to it exits, which nothing here does around a job.
func startGroup(cmd *exec.Cmd) (*runGroup, error) {
	if supervise.Enabled() {
		p, err := supervise.Start(cmd, supervise.Options{})
		if err != nil {
			return nil, err
		}
		return &runGroup{pid: p.Cmd.Process.Pid, pgid: p.Pgid, proc: p}, nil
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &runGroup{pid: cmd.Process.Pid, pgid: cmd.Process.Pid}, nil
}

// kill SIGKILLs everything of the run that is still there.
func (g *runGroup) kill() {
	if g.proc != nil {
		g.proc.Kill() // the supervisor kills the whole tree, then exits
		return
	}
	signalGroup(g.pgid, syscall.SIGKILL)
	// The leader too, in case it moved itself to another group.
	_ = unix.Kill(g.pid, unix.SIGKILL)
}

// exited is called once the waited-for process has exited, before it is
// reaped. A supervisor exits only when nothing of the run is left. An
// unsupervised leader is a zombie until cmd.Wait reaps it, so its pid (the
// pgid) cannot have been reused: this kill reaches only what is left of
// the run (children of a leader that exited, or ones that ignored SIGTERM).
func (g *runGroup) exited() {
	if g.proc == nil {
		signalGroup(g.pgid, syscall.SIGKILL)
	}
}

// release frees the supervisor's lifeline once the run is over.
func (g *runGroup) release() {
	if g.proc != nil {
		g.proc.Kill()
	}
}
