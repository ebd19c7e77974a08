package jobs

import "syscall"

// procAttr puts the child in a process group of its own (pgid = its pid)
// and has the kernel SIGKILL it if this process dies first. Without that, a
// scheduler killed with -9 leaves its job running unsupervised: the lock
// it ran under is gone (at once with Postgres, whose session dies with the
// process; after the TTL with Redis), so another node starts the next run
// while the orphan still writes. No one is left to send SIGTERM then
// SIGKILL, so the kernel sends SIGKILL at once.
//
// The signal reaches the group's leader only (what it started must exit
// when it does), and Linux sends it when the thread that forked the child
// ends; Go ends a thread only when a goroutine locked to it exits, which
// nothing in this program does around a job.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
