//go:build !linux

package jobs

import "syscall"

// procAttr puts the child in a process group of its own (pgid = its pid).
// Elsewhere than Linux there is no parent-death signal: a job outlives a
// scheduler killed with -9 (see procattr_linux.go).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
