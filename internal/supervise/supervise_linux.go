package supervise

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const supported = true

// lifelineFD is the supervisor's end of the lifeline (ExtraFiles[0]).
const lifelineFD = 3

// Options say how the command is started.
type Options struct {
	// Foreground puts the command's process group in the foreground of
	// the terminal on this process's stdin (which must be the starter's
	// controlling terminal, in the foreground), so a command that reads
	// the terminal is not stopped by SIGTTIN. The supervisor hands the
	// terminal back to the starter's group before it exits.
	Foreground bool
}

// Proc is a command running under its supervisor.
type Proc struct {
	// Cmd is the supervisor process: Wait for it; it exits once the
	// command and all it started are gone, with the command's exit code,
	// or killed by the signal that killed the command.
	Cmd *exec.Cmd
	// Pgid is the command's process group (its pid): signal it to reach
	// the command and what it started without touching the supervisor.
	Pgid int

	once sync.Once
	life *os.File
}

// Kill closes the lifeline: the supervisor SIGKILLs the command and every
// descendant, then exits. Call it also once the supervisor has exited, to
// free the lifeline; it is safe to call more than once.
func (p *Proc) Kill() {
	p.once.Do(func() { _ = p.life.Close() })
}

// StartError is a command the supervisor could not start (exec failed).
type StartError struct {
	Msg   string
	Errno syscall.Errno
}

func (e *StartError) Error() string { return e.Msg }

// Unwrap returns the errno, so errors.Is(err, fs.ErrNotExist) works.
func (e *StartError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// Start starts cmd under a supervisor. cmd is prepared as for exec: Path
// already resolved (exec.Command does that), Args, Env, Dir and the three
// standard streams; it must not have SysProcAttr or ExtraFiles. Start
// rewrites it to run the supervisor, which runs the command; it returns
// once the command has started (or with its exec error).
func Start(cmd *exec.Cmd, o Options) (*Proc, error) {
	if !Enabled() {
		return nil, ErrUnavailable
	}
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	if cmd.SysProcAttr != nil || len(cmd.ExtraFiles) > 0 {
		return nil, errors.New("supervise: cmd must not set SysProcAttr or ExtraFiles")
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("supervise: lifeline: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "bext-lifeline")
	theirs := os.NewFile(uintptr(fds[1]), "bext-lifeline")

	marker := protocol
	if o.Foreground {
		marker += ":fg:" + strconv.Itoa(unix.Getpgrp())
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	path, args := cmd.Path, cmd.Args
	// /proc/self/exe, not os.Args[0]: it names this very binary even
	// when it was started through PATH, or replaced on disk by an upgrade.
	cmd.Path = "/proc/self/exe"
	cmd.Args = append([]string{"bext-supervisor", path}, args...)
	cmd.Env = append(env[:len(env):len(env)], markerEnv+"="+marker)
	cmd.ExtraFiles = []*os.File{theirs}
	// Its own group: a signal to the starter's group (a shell's kill -9
	// %1) must not take the supervisor with the starter.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	_ = theirs.Close()
	if err != nil {
		_ = ours.Close()
		return nil, err
	}
	p := &Proc{Cmd: cmd, life: ours}
	pgid, err := readStarted(ours)
	if err != nil {
		p.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	p.Pgid = pgid
	return p, nil
}

// readStarted reads the supervisor's one status line: "ok PID" or
// "err ERRNO MESSAGE".
func readStarted(r io.Reader) (int, error) {
	// Byte by byte: nothing after the line may be consumed (there is
	// nothing, but the lifeline must stay a plain fd).
	var line []byte
	b := make([]byte, 1)
	for {
		n, err := r.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("supervise: the supervisor ended before starting the command (%q): %w", line, err)
		}
	}
	kind, rest, _ := strings.Cut(string(line), " ")
	switch kind {
	case "ok":
		pid, err := strconv.Atoi(rest)
		if err != nil || pid <= 0 {
			return 0, fmt.Errorf("supervise: bad status %q", line)
		}
		return pid, nil
	case "err":
		num, msg, _ := strings.Cut(rest, " ")
		n, _ := strconv.Atoi(num)
		return 0, &StartError{Msg: msg, Errno: syscall.Errno(n)}
	}
	return 0, fmt.Errorf("supervise: bad status %q", line)
}

// StdinIsForegroundTTY reports whether stdin is this process's controlling
// terminal and this process's group is its foreground group: then a child
// put in a group of its own must be made the foreground, or reading the
// terminal stops it.
func StdinIsForegroundTTY() bool {
	pg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pg == unix.Getpgrp()
}

// RestoreTTY hands the terminal on stdin back to this process's group if
// group pgid still has it (a supervisor killed before it could). This
// process is then in the background, so SIGTTOU is ignored for it: call it
// only after the last child was started.
func RestoreTTY(pgid int) {
	if pg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP); err != nil || pg != pgid {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, unix.Getpgrp())
}

// supervisor is the supervisor process's main; see the package comment.
func supervisor(marker string) int {
	// The command's parent-death signal follows the thread that forked it:
	// fork from the main thread, which lives as long as this process.
	runtime.LockOSThread()
	life := os.NewFile(lifelineFD, "bext-lifeline")
	unix.CloseOnExec(lifelineFD)
	fail := func(err error) int {
		var errno syscall.Errno
		errors.As(err, &errno)
		msg := strings.ReplaceAll(err.Error(), "\n", " ")
		fmt.Fprintf(life, "err %d %s\n", int(errno), msg)
		return 127
	}

	fields := strings.Split(marker, ":")
	if fields[0] != protocol || len(os.Args) < 3 {
		return fail(fmt.Errorf("bext-supervisor: started with protocol %q, args %d: the binary changed under its starter?", fields[0], len(os.Args)))
	}
	fgPgrp := 0
	if len(fields) == 3 && fields[1] == "fg" {
		fgPgrp, _ = strconv.Atoi(fields[2])
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("bext-supervisor: PR_SET_CHILD_SUBREAPER: %w", err))
	}
	env := os.Environ()
	kept := env[:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, markerEnv+"=") {
			kept = append(kept, kv)
		}
	}
	cmd := &exec.Cmd{Path: os.Args[1], Args: os.Args[2:], Env: kept,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
	if fgPgrp != 0 {
		// Go puts the child's new group in the foreground before exec,
		// with signals blocked, so SIGTTOU does not stop it.
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, 0
	}
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	pid := cmd.Process.Pid
	// An error means the starter is gone already: the lifeline reads EOF
	// below, and everything is killed.
	_, _ = fmt.Fprintf(life, "ok %d\n", pid)

	// Reap every child: the command, and each orphan re-parented to us.
	// Only after Start, which reaps a child whose exec failed itself.
	status := make(chan unix.WaitStatus, 1)
	none := make(chan struct{})
	go func() {
		defer close(none)
		for {
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(-1, &ws, 0, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil { // ECHILD: no child, so no descendant, is left
				return
			}
			if wpid == pid {
				status <- ws
			}
		}
	}()
	lifeGone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, life)
		close(lifeGone)
	}()

	var ws unix.WaitStatus
	select {
	case ws = <-status:
	case <-lifeGone:
	}
	killAll(none)
	select {
	case ws = <-status: // sent before none was closed
	default:
	}
	if fgPgrp != 0 {
		if pg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP); err == nil && pg == pid {
			signal.Ignore(syscall.SIGTTOU) // we are in the background
			_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, fgPgrp)
		}
	}
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		dieBy(ws.Signal())
		return 128 + int(ws.Signal())
	}
	return 128 + int(syscall.SIGKILL)
}

// killAll SIGKILLs every descendant of this process until none is left
// (none is closed). Rounds repeat: a process forked between the /proc
// scan and its parent's death is re-parented to us and caught next round.
func killAll(none <-chan struct{}) {
	self := os.Getpid()
	for {
		for _, pid := range descendants(self) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-none:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// descendants lists the live descendants of pid, read from /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parens.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// dieBy ends this process with sig, as the command ended, so the starter
// sees the same wait status. The Go runtime's own handlers are bypassed
// (SIGQUIT would dump goroutines), and no core is dumped for us.
func dieBy(sig syscall.Signal) {
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	var dfl [64]byte // struct sigaction, all zero: SIG_DFL, no flags, empty mask
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	var set unix.Sigset_t
	set.Val[(int(sig)-1)/64] |= 1 << ((uint(sig) - 1) % 64)
	_ = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	_ = unix.Kill(os.Getpid(), sig)
	time.Sleep(100 * time.Millisecond) // a stop or ignored signal: exit below
}
