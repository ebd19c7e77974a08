package jobs

import "github.com/bext-dev/bext-scheduler/internal/supervise"

// Supervise lets Command put each run under a supervisor process, so that
// the command and everything it starts die with this process even when it
// is killed with SIGKILL (see Command). The supervisor is this program
// re-executed, so call Supervise first in main, before flags are parsed or
// anything else runs: in a process started as a supervisor it does the
// supervisor's work and exits; otherwise it returns at once.
//
// A program that does not call it keeps the weaker guarantee: on Linux the
// command's leader gets a parent-death SIGKILL, but what the command forked
// lives on after this process is killed. Supervising needs Linux.
func Supervise() { supervise.Main() }
