package jobs

import "golang.org/x/sys/unix"

// waitExited blocks until process pid has exited, without reaping it
// (WNOWAIT): cmd.Wait reaps it later, after the group kill.
func waitExited(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			// On any other error cmd.Wait still blocks until the exit.
			return
		}
	}
}
