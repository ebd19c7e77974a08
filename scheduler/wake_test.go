package scheduler

import "testing"

// An injected clock has timers of its own: no kernel wake for it.
func TestWallWakeNotForInjectedClocks(t *testing.T) {
	w, err := newWallWake(stubClock{})
	if w != nil || err != nil {
		t.Fatalf("newWallWake(stub) = %v, %v; want nil, nil", w, err)
	}
}

type stubClock struct{ Clock }
