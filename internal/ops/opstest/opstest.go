// Package opstest gives the tests of ops, the API and the CLI the real
// backends they run against, each as an ops.Store with its own namespace.
package opstest

import (
	"context"
	"testing"

	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/locking/memory"
)

// Backend opens a fresh store of one backend kind for a test, closed at
// its end.
type Backend struct {
	Name string
	Open func(t testing.TB) ops.Store
}

// Backends lists every real backend.
func Backends() []Backend {
	return []Backend{
		{"memory", Memory},
	}
}

// Memory is a fresh in-process store.
func Memory(t testing.TB) ops.Store {
	l := memory.New()
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// ForEach runs f once per backend, as a subtest named after it.
func ForEach(t *testing.T, f func(t *testing.T, st ops.Store)) {
	for _, b := range Backends() {
		t.Run(b.Name, func(t *testing.T) { f(t, b.Open(t)) })
	}
}
