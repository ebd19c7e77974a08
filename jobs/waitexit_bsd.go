//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package jobs

import "golang.org/x/sys/unix"

// waitExited blocks until process pid has exited, without reaping it:
// these systems have no waitid(WNOWAIT), so the kernel's process-exit
// event (kqueue EVFILT_PROC, NOTE_EXIT) tells instead. cmd.Wait reaps it
// later, after the group kill, as on Linux.
func waitExited(pid int) {
	kq, err := unix.Kqueue()
	if err != nil {
		return // cmd.Wait still blocks until the exit
	}
	defer unix.Close(kq)
	ev := []unix.Kevent_t{{}}
	unix.SetKevent(&ev[0], pid, unix.EVFILT_PROC, unix.EV_ADD|unix.EV_ONESHOT)
	ev[0].Fflags = unix.NOTE_EXIT
	for {
		n, err := unix.Kevent(kq, ev, ev, nil)
		if err == unix.EINTR {
			continue
		}
		// ESRCH: it has exited already (and is a zombie until reaped).
		if err != nil || n > 0 {
			return
		}
	}
}
