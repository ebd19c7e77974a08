//go:build !simmut

package mutation

// On reports whether mutation n is active: never, without the simmut tag.
func On(n Name) bool { return false }

// Stale returns v: without the simmut tag nothing is remembered (see the
// tagged version).
func Stale[T any](key string, v T) T { return v }
