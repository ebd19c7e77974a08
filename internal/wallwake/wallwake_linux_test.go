//go:build linux

package wallwake

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel side of the loop's wake. What no test here can do is step
// the wall clock or suspend the host: both need privileges and would
// disturb everything else on the machine. So the ECANCELED path is
// exercised through readLoop with the read injected, and the flag that
// asks the kernel for it is checked in /proc/self/fdinfo.

func newTestWallWake(t *testing.T, offset time.Duration) *Wake {
	t.Helper()
	w, err := New(offset)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(w.Close)
	return w
}

// awaitWake waits for w's wake and returns the wall time it was seen.
func awaitWake(t *testing.T, w *Wake) time.Time {
	t.Helper()
	select {
	case <-w.C():
		return time.Now()
	case <-time.After(20 * time.Second):
		t.Fatal("the wall-clock wake never fired")
	}
	return time.Time{}
}

func TestWallWakeFiresAtAbsoluteWallTime(t *testing.T) {
	w := newTestWallWake(t, 0)
	at := time.Now().Add(50 * time.Millisecond)
	if err := w.Arm(at.UnixNano()); err != nil {
		t.Fatal(err)
	}
	if got := awaitWake(t, w); got.Before(at) {
		t.Fatalf("woke at %v, %v before the deadline", got, at.Sub(got))
	}
	if err := w.Failed(); err != nil {
		t.Fatalf("failed: %v", err)
	}
}

func TestWallWakeInThePastFiresAtOnce(t *testing.T) {
	w := newTestWallWake(t, 0)
	for _, at := range []int64{time.Now().Add(-time.Hour).UnixNano(), 0, -5} {
		if err := w.Arm(at); err != nil {
			t.Fatal(err)
		}
		awaitWake(t, w)
	}
}

// A later arm replaces the deadline: the loop re-arms on every turn.
func TestWallWakeRearmReplacesDeadline(t *testing.T) {
	w := newTestWallWake(t, 0)
	now := time.Now()
	if err := w.Arm(now.Add(500 * time.Millisecond).UnixNano()); err != nil {
		t.Fatal(err)
	}
	later := now.Add(800 * time.Millisecond)
	if err := w.Arm(later.UnixNano()); err != nil {
		t.Fatal(err)
	}
	if got := awaitWake(t, w); got.Before(later) {
		t.Fatalf("woke %v before the deadline armed last", later.Sub(got))
	}
}

// An offset clock's times (OffsetClock) are moved back onto the real wall
// clock.
func TestWallWakeOffsetClock(t *testing.T) {
	w := newTestWallWake(t, time.Hour)
	at := time.Now().Add(50 * time.Millisecond)
	if err := w.Arm(at.Add(time.Hour).UnixNano()); err != nil {
		t.Fatal(err)
	}
	if got := awaitWake(t, w); got.Before(at) {
		t.Fatalf("woke %v before the deadline", at.Sub(got))
	}
}

// The timerfd is on CLOCK_REALTIME, armed absolute and cancelled on a
// clock set, as the kernel reports it; disarm clears it.
func TestWallWakeKernelSettings(t *testing.T) {
	w := newTestWallWake(t, 0)
	at := time.Now().Add(time.Hour)
	if err := w.Arm(at.UnixNano()); err != nil {
		t.Fatal(err)
	}
	info := fdinfo(t, w)
	for _, want := range []string{"clockid: 0\n", "settime flags: 03\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("fdinfo lacks %q:\n%s", want, info)
		}
	}
	// Non-blocking, so its reader parks in the netpoller, not a thread.
	var fl int
	var err error
	if cerr := w.rc.Control(func(fd uintptr) { fl, err = unix.FcntlInt(fd, unix.F_GETFL, 0) }); cerr != nil || err != nil {
		t.Fatal(cerr, err)
	}
	if fl&unix.O_NONBLOCK == 0 {
		t.Error("the timerfd is blocking: its reader would hold a thread")
	}
	var cur unix.ItimerSpec
	gettime(t, w, &cur)
	if left := time.Duration(cur.Value.Nano()); left <= 59*time.Minute || left > time.Hour {
		t.Errorf("armed for %v from now, want about an hour", left)
	}
	if err := w.Disarm(); err != nil {
		t.Fatal(err)
	}
	gettime(t, w, &cur)
	if cur.Value.Nano() != 0 {
		t.Errorf("disarmed timer still due in %v", time.Duration(cur.Value.Nano()))
	}
}

func fdinfo(t *testing.T, w *Wake) string {
	t.Helper()
	var b []byte
	var err error
	if cerr := w.rc.Control(func(fd uintptr) {
		b, err = os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	}); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func gettime(t *testing.T, w *Wake, cur *unix.ItimerSpec) {
	t.Helper()
	var err error
	if cerr := w.rc.Control(func(fd uintptr) { err = unix.TimerfdGettime(int(fd), cur) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestReadOutcome(t *testing.T) {
	pathErr := func(err error) error { return &fs.PathError{Op: "read", Path: "timerfd", Err: err} }
	for _, c := range []struct {
		name       string
		err        error
		wake, stop bool
		failed     bool
	}{
		{"expired", nil, true, false, false},
		{"clock set", pathErr(syscall.ECANCELED), true, false, false},
		{"closed", pathErr(os.ErrClosed), false, true, false},
		{"broken", pathErr(syscall.EIO), true, true, true},
	} {
		wake, stop, failure := readOutcome(c.err)
		if wake != c.wake || stop != c.stop || (failure != nil) != c.failed {
			t.Errorf("%s: readOutcome = %v, %v, %v; want wake %v, stop %v, failed %v",
				c.name, wake, stop, failure, c.wake, c.stop, c.failed)
		}
		if c.failed && !errors.Is(failure, syscall.EIO) {
			t.Errorf("%s: failure %v does not wrap its cause", c.name, failure)
		}
	}
}

// readLoop, fed the reads a clock step and a broken fd would return: a
// step wakes the loop and the reader goes on; a broken fd wakes it with
// the failure recorded, and the reader ends.
func TestWallWakeReadLoop(t *testing.T) {
	w := &Wake{c: make(chan struct{}, 1)}
	reads := make(chan error)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.readLoop(func([]byte) (int, error) {
			err := <-reads
			if err != nil {
				return 0, err
			}
			return 8, nil
		})
	}()
	expect := func(what string) {
		t.Helper()
		select {
		case <-w.C():
		case <-time.After(20 * time.Second):
			t.Fatalf("no wake after %s", what)
		}
	}
	reads <- &fs.PathError{Op: "read", Path: "timerfd", Err: syscall.ECANCELED}
	expect("ECANCELED")
	if err := w.Failed(); err != nil {
		t.Fatalf("a clock step counted as a failure: %v", err)
	}
	reads <- nil
	expect("an expiry")
	// Two expiries before the loop takes one: one wake serves, and the
	// reader does not block on the full channel.
	reads <- nil
	reads <- nil
	expect("two expiries")
	reads <- &fs.PathError{Op: "read", Path: "timerfd", Err: syscall.EIO}
	expect("a failed read")
	<-done
	if err := w.Failed(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("failed() = %v, want EIO", err)
	}
}

// close ends a reader parked in the netpoller (goleak in TestMain checks
// that it is gone) and delivers no wake.
func TestWallWakeCloseEndsReader(t *testing.T) {
	w, err := New(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Arm(time.Now().Add(time.Hour).UnixNano()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	select {
	case <-w.C():
		t.Fatal("close delivered a wake")
	default:
	}
	if err := w.Failed(); err != nil {
		t.Fatalf("close counted as a failure: %v", err)
	}
}
