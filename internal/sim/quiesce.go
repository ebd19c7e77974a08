package sim

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"time"
)

// Quiescence: after each step of the fake clock the harness waits until
// every goroutine of the cluster is blocked, so that the next step starts
// from a state the code under test reached by itself. scheduler.WaitIdle
// cannot serve: it is a test-only export of package scheduler, and it
// waits for the ticks in flight to end, which a job sleeping on the fake
// clock never does until the clock moves.
//
// A goroutine dump is taken with the world stopped, so when it shows no
// goroutine but the caller running, runnable or in a system call, nothing
// can move until something outside (the fake clock, a real-time timer)
// wakes a goroutine: the cluster is quiescent.

// quiescer waits for quiescence, reusing its dump buffer.
type quiescer struct {
	buf []byte
}

// busyStates are the goroutine states of a goroutine that can still move.
var busyStates = [][]byte{
	[]byte("running"), []byte("runnable"), []byte("syscall"),
	[]byte("copystack"), []byte("preempted"),
}

// wait returns once no other goroutine can move, or ctx ends.
func (q *quiescer) wait(ctx context.Context) error {
	// What the step woke usually settles within a few yields: a dump
	// (the world stopped, every stack printed) costs far more than they
	// do, and the first one finds the cluster quiet more often after them
	// (2.3 dumps a step before, 1.6 after, over 60 seeds).
	for range 8 {
		runtime.Gosched()
	}
	for i := 0; ; i++ {
		if q.quiet() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sim: cluster never became quiescent: %w\n%s", err, q.dump())
		}
		if i < 64 {
			runtime.Gosched()
		} else {
			// A goroutine may be busy for longer (the race detector, a
			// loaded machine): stop spinning on the dump.
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// quiet reports whether every goroutine but the caller is blocked.
func (q *quiescer) quiet() bool {
	d := q.dump()
	first := true
	for len(d) > 0 {
		// Each goroutine's block starts "goroutine N [state...]:" and ends
		// at a blank line; the caller's comes first.
		var block []byte
		if i := bytes.Index(d, []byte("\n\n")); i >= 0 {
			block, d = d[:i], d[i+2:]
		} else {
			block, d = d, nil
		}
		if first {
			first = false
			continue
		}
		if busy(block) {
			return false
		}
	}
	return true
}

func busy(block []byte) bool {
	open := bytes.IndexByte(block, '[')
	if open < 0 {
		return false
	}
	state := block[open+1:]
	for _, s := range busyStates {
		if bytes.HasPrefix(state, s) {
			// os/signal's loop and a CPU profile's writer (-cpuprofile)
			// sit in a system call for ever.
			return !bytes.Contains(block, []byte("os/signal.signal_recv")) &&
				!bytes.Contains(block, []byte("runtime/pprof.profileWriter"))
		}
	}
	return false
}

func (q *quiescer) dump() []byte {
	if q.buf == nil {
		q.buf = make([]byte, 1<<18)
	}
	for {
		n := runtime.Stack(q.buf, true)
		if n < len(q.buf) {
			return q.buf[:n]
		}
		q.buf = make([]byte, 2*len(q.buf))
	}
}
