//go:build simmut

package mutation

import "sync"

var (
	mu     sync.Mutex
	active Name
	stale  map[string]any
)

// On reports whether mutation n is the active one.
func On(n Name) bool {
	mu.Lock()
	defer mu.Unlock()
	return active == n
}

// Set makes n the active mutation ("" for none) and forgets every value
// Stale remembered.
func Set(n Name) {
	mu.Lock()
	defer mu.Unlock()
	active, stale = n, nil
}

// Stale returns the value remembered for key by the previous call (v
// itself on the first) and remembers v: a value read earlier, for a
// mutation that decides on one.
func Stale[T any](key string, v T) T {
	mu.Lock()
	defer mu.Unlock()
	if stale == nil {
		stale = map[string]any{}
	}
	prev, ok := stale[key]
	stale[key] = v
	if !ok {
		return v
	}
	return prev.(T)
}
