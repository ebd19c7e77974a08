package fakeclock_test

import (
	"context"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/scheduler/fakeclock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestAdvanceFiresInTimeOrder(t *testing.T) {
	c := fakeclock.New(start)
	late, early := c.NewTimer(3*time.Second), c.NewTimer(time.Second)
	unfired := c.NewTimer(10 * time.Second)
	c.Advance(5 * time.Second)
	if got := <-early.C(); !got.Equal(start.Add(time.Second)) {
		t.Errorf("early fired at %v, want start+1s", got)
	}
	if got := <-late.C(); !got.Equal(start.Add(3 * time.Second)) {
		t.Errorf("late fired at %v, want start+3s", got)
	}
	select {
	case v := <-unfired.C():
		t.Errorf("timer due at +10s fired at %v", v)
	default:
	}
	if now := c.Now(); !now.Equal(start.Add(5 * time.Second)) {
		t.Errorf("Now = %v, want start+5s", now)
	}
	if n := c.Armed(); n != 1 {
		t.Errorf("Armed = %d, want 1", n)
	}
}

func TestStopAndResetDropStaleValues(t *testing.T) {
	c := fakeclock.New(start)
	tm := c.NewTimer(time.Second)
	c.Advance(time.Second) // fired, not received
	if tm.Stop() {
		t.Error("Stop of a fired timer reported it armed")
	}
	select {
	case <-tm.C():
		t.Error("a stopped timer delivered a value fired before Stop")
	default:
	}
	if tm.Reset(2 * time.Second) {
		t.Error("Reset of a stopped timer reported it armed")
	}
	if !tm.Reset(time.Second) {
		t.Error("Reset of an armed timer reported it not armed")
	}
	c.Advance(time.Second)
	if got := <-tm.C(); !got.Equal(start.Add(2 * time.Second)) {
		t.Errorf("reset timer fired at %v, want start+2s", got)
	}
	if z := c.NewTimer(0); z == nil {
		t.Fatal("nil timer")
	} else if got := <-z.C(); !got.Equal(c.Now()) {
		t.Errorf("zero-duration timer fired at %v", got)
	}
}

func TestBlockUntilArmed(t *testing.T) {
	c := fakeclock.New(start)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.NewTimer(time.Second)
		c.NewTimer(time.Second)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.BlockUntilArmed(ctx, 2); err != nil {
		t.Fatal(err)
	}
	<-done
	short, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := c.BlockUntilArmed(short, 3); err == nil {
		t.Error("BlockUntilArmed(3) with 2 armed and a cancelled context returned nil")
	}
}

func TestAfterFuncCallsOnceWhenDueAndStopPreventsIt(t *testing.T) {
	c := fakeclock.New(start)
	fired := make(chan time.Time, 2)
	tm := c.AfterFunc(2*time.Second, func() { fired <- c.Now() })
	if tm.C() != nil {
		t.Error("an AfterFunc timer has a channel; time.AfterFunc's C is nil")
	}
	c.Advance(time.Second)
	select {
	case <-fired:
		t.Fatal("AfterFunc called f before its time")
	default:
	}
	c.Advance(time.Second)
	if got := <-fired; !got.Equal(start.Add(2 * time.Second)) {
		t.Errorf("f ran at %v, want start+2s", got)
	}
	if tm.Stop() {
		t.Error("Stop after f started reported the timer armed")
	}
	if tm.Reset(time.Second) {
		t.Error("Reset of a fired timer reported it armed")
	}
	if !tm.Stop() {
		t.Error("Stop of a re-armed timer reported it not armed")
	}
	c.Advance(time.Hour)
	if c.Armed() != 0 {
		t.Errorf("Armed = %d after Stop, want 0", c.Armed())
	}
	select {
	case <-fired:
		t.Error("a stopped AfterFunc timer called f")
	default:
	}
	// Reset with d <= 0 calls f at once, like time.AfterFunc(0, f).
	tm.Reset(0)
	if got := <-fired; !got.Equal(start.Add(2*time.Second + time.Hour)) {
		t.Errorf("f ran at %v after Reset(0), want now", got)
	}
}

// BlockUntilSettled waits for the functions AfterFunc started as well as
// for armed timers: a function that re-arms its timer and then goes on
// working (a run's watch renewing) leaves the clock armed but not settled.
func TestBlockUntilSettledWaitsForAfterFuncs(t *testing.T) {
	c := fakeclock.New(start)
	rearmed, finish, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var tm interface{ Reset(time.Duration) bool }
	tm = c.AfterFunc(time.Second, func() {
		tm.Reset(time.Second) // armed again, then the rest of the work
		close(rearmed)
		<-finish
		close(finished)
	})
	c.Advance(time.Second)
	<-rearmed
	if c.Armed() != 1 {
		t.Fatalf("Armed = %d once f re-armed its timer, want 1", c.Armed())
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.BlockUntilSettled(short, 1); err == nil {
		t.Fatal("BlockUntilSettled returned while f was still running")
	}
	close(finish)
	ctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := c.BlockUntilSettled(ctx, 1); err != nil {
		t.Fatalf("BlockUntilSettled after f returned: %v", err)
	}
	<-finished
}
