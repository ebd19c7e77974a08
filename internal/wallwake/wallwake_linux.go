//go:build linux

// Package wallwake wakes the scheduler's loop at a wall-clock time, from
// the kernel (Linux timerfd; elsewhere New returns nil and the loop
// re-reads the clock every few seconds).
//
// A Go timer counts CLOCK_MONOTONIC: it stops while the host is suspended
// and ignores a step of the wall clock, so a timer armed for a tick an
// hour away would fire an hour late after such a jump. The loop used to
// re-read the wall clock every maxSleep (2 s) for that reason, and those
// wakes were most of an idle scheduler's CPU. A timerfd on CLOCK_REALTIME
// armed with TFD_TIMER_ABSTIME expires when the wall clock reaches the
// head tick, whatever happened in between (the kernel re-evaluates
// absolute realtime timers on a resume or a clock set), and with
// TFD_TIMER_CANCEL_ON_SET a read fails with ECANCELED as soon as the wall
// clock is set (and after a resume, on kernels whose timekeeping_resume
// calls timerfd_resume), so the loop also hears of a step before its
// deadline and re-reads the clock. One ECANCELED per set: the read that
// returns it clears it, and the fd reads EAGAIN again until the next
// expiry or set. The scheduler's lease clock (scheduler/bootcache.go) needs nothing from
// here: it notices the same jumps itself, as the wall clock moving against
// the monotonic one, on its next reading.
//
// The fd is non-blocking and wrapped in an *os.File, so the goroutine that
// reads it parks in the runtime's netpoller: no thread is held while it
// waits, unlike a blocking read, which would pin an OS thread for the
// whole life of Run. A goroutine is still needed because the loop waits in
// a select, and a read is not a channel; it hands each expiry to the loop
// through a channel and ends when the loop closes the file.

package wallwake

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Wake is a wake-up at a wall-clock time, delivered on C.
type Wake struct {
	f      *os.File
	rc     rawControl
	offset int64 // the scheduler's clock minus the real one, in ns
	c      chan struct{}
	done   chan struct{} // closed when the reader has returned
	err    atomic.Pointer[error]
}

// rawControl is the part of syscall.RawConn that arm uses: Control keeps
// the fd open while it runs, and, unlike File.Fd, leaves it non-blocking.
type rawControl interface {
	Control(func(fd uintptr)) error
}

// New returns a kernel wake for a clock offset ahead of the real wall
// clock (0 for the real one). The caller must Close it.
func New(offset time.Duration) (*Wake, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_REALTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	w := &Wake{f: f, rc: rc, offset: int64(offset), c: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.readLoop(f.Read)
	}()
	return w, nil
}

// C yields after the wall clock reached the time last armed, after the
// wall clock was set, or when the wake failed (see Failed). A value may
// be stale (from a deadline armed before): the loop re-reads the clock on
// every wake, so a spurious one costs a turn, never a tick.
func (w *Wake) C() <-chan struct{} { return w.c }

// Arm sets the wake to at, a Unix time in ns on the offset clock,
// replacing the deadline armed before.
func (w *Wake) Arm(at int64) error {
	at -= w.offset
	if at <= 0 {
		at = 1 // a zero it_value would disarm; any past time fires at once
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(at)}
	return w.settime(unix.TFD_TIMER_ABSTIME|unix.TFD_TIMER_CANCEL_ON_SET, &spec)
}

// Disarm cancels the deadline (an empty heap has nothing to wake for).
func (w *Wake) Disarm() error { return w.settime(0, &unix.ItimerSpec{}) }

func (w *Wake) settime(flags int, spec *unix.ItimerSpec) error {
	var err error
	if cerr := w.rc.Control(func(fd uintptr) {
		err = unix.TimerfdSettime(int(fd), flags, spec, nil)
	}); cerr != nil {
		return fmt.Errorf("timerfd_settime: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("timerfd_settime: %w", err)
	}
	return nil
}

// Failed is the error that stopped the reader, nil while it works.
func (w *Wake) Failed() error {
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Close stops the reader (a read parked in the netpoller returns
// os.ErrClosed) and waits for it: no goroutine outlives its owner.
func (w *Wake) Close() {
	w.f.Close()
	<-w.done
}

// readLoop reads expiries until the file is closed or a read fails in a
// way that will not heal, telling the loop of each.
func (w *Wake) readLoop(read func([]byte) (int, error)) {
	var buf [8]byte // the expiry count, which the loop has no use for
	for {
		_, err := read(buf[:])
		wake, stop, failure := readOutcome(err)
		if failure != nil {
			w.err.Store(&failure)
		}
		if wake {
			select {
			case w.c <- struct{}{}:
			default: // a wake is pending already: one serves
			}
		}
		if stop {
			return
		}
	}
}

// readOutcome says what one read of the timerfd means: whether the loop
// must wake, whether the reader stops, and why it failed if it did.
func readOutcome(err error) (wake, stop bool, failure error) {
	switch {
	case err == nil:
		return true, false, nil // the deadline passed
	case errors.Is(err, unix.ECANCELED):
		// The wall clock was set (stepped, or moved by a resume): the
		// deadline still holds in wall time, but what is due may have
		// changed (a step forward past the head), so the loop re-reads
		// the clock and re-arms.
		return true, false, nil
	case errors.Is(err, os.ErrClosed):
		return false, true, nil // the loop is done with it
	default:
		// Unexpected: wake the loop so it notices, and goes back to
		// re-reading the clock every maxSleep.
		return true, true, fmt.Errorf("timerfd read: %w", err)
	}
}
