// Package supervise runs a command under a small supervisor process so
// that the command, with everything it started, never outlives the process
// that started it, even one killed with SIGKILL.
//
// A parent-death signal on the direct child is not enough: the kernel
// sends it to that child only, so `sh -c 'sleep 300 & sleep 300'` leaves
// its background sleep running, re-parented to PID 1, after its scheduler
// or `lock run` was killed with -9; and the lock it ran under is gone.
//
// The supervisor is this same binary re-executed (/proc/self/exe) with a
// marker in its environment, which Main recognises before anything else
// runs. It
//   - is the leader of a process group of its own (so a signal to the
//     starter's group, such as a shell's kill -9 %1, does not reach it);
//   - makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), so every
//     orphaned descendant of the command, also one that called setsid and
//     left the command's group, is re-parented to it instead of to PID 1;
//   - starts the command in a new process group (the terminal's foreground
//     group when asked), with a parent-death SIGKILL for the case where the
//     supervisor itself is killed;
//   - holds one end of a socket pair whose other end only the starter
//     holds (the lifeline). The kernel closes the starter's end when the
//     starter dies, however it dies, so the supervisor reads EOF: it then
//     SIGKILLs every descendant and reaps them until it has no child left,
//     which, as a subreaper, means none of them is left.
//
// A lifeline rather than a parent-death signal on the supervisor: Linux
// sends that signal when the starter's *thread* that forked ends
// (go.dev/issue/27505), and a signal handler must guess whether a SIGTERM
// came from the kernel or from kill(1). A pidfd of the starter, polled by
// the supervisor, would work too, but must be opened after the start (a
// race with an early death) and says nothing more; the lifeline is
// inherited, so it has no such window, and closing it early is also how
// the starter asks for everything to be killed. cgroups would contain
// everything, but are usually not delegated to an unprivileged service.
//
// What still escapes: processes handed to something outside the tree
// (systemd-run, at, a container engine, ssh to another host), and, if the
// supervisor itself is SIGKILLed while its starter lives, the command's
// descendants (the command is killed by its parent-death signal; the
// starter then kills the command's group, so only descendants that left
// it survive).
package supervise

import (
	"errors"
	"os"
	"sync/atomic"
)

// markerEnv marks a process started as a supervisor. Its value is the
// protocol version, then ":fg:<pgrp>" when the command must be put in the
// terminal's foreground (and the terminal handed back to pgrp at the end).
const markerEnv = "BEXT_SUPERVISOR"

const protocol = "v1"

// ErrUnavailable is returned by Start when this program cannot supervise:
// Main was not called first in main, or the platform is not Linux.
var ErrUnavailable = errors.New("supervise: supervisor unavailable (Main not called first in main, or not Linux)")

var enabled atomic.Bool

// Main must be called first in main by a program that starts supervised
// commands. In a process started as a supervisor it runs the supervisor
// and exits; otherwise it returns at once and enables Start.
func Main() {
	if v, ok := os.LookupEnv(markerEnv); ok {
		os.Exit(supervisor(v))
	}
	enabled.Store(supported)
}

// Enabled reports whether Start can be used.
func Enabled() bool { return enabled.Load() }
