//go:build !linux

package supervise

import (
	"os"
	"os/exec"
)

const supported = false

// Options are Start's; see supervise_linux.go.
type Options struct{ Foreground bool }

// Proc is a supervised command; see supervise_linux.go.
type Proc struct {
	Cmd  *exec.Cmd
	Pgid int
}

// Start is unavailable here: callers start the command themselves.
func Start(*exec.Cmd, Options) (*Proc, error) { return nil, ErrUnavailable }

// Kill does nothing: no Proc exists here.
func (p *Proc) Kill() {}

func supervisor(string) int {
	os.Stderr.WriteString("bext-supervisor: supported on Linux only\n")
	return 127
}

// StdinIsForegroundTTY is false here: nothing is put in the foreground.
func StdinIsForegroundTTY() bool { return false }

// RestoreTTY does nothing here.
func RestoreTTY(int) {}
