// Package hints owns the three locking hints a schedule declares and how
// each resolves against the lock backend a node has.
package hints

import (
	"errors"
	"fmt"
)

// Hint is a schedule's locking hint, as spelled in TOML.
type Hint string

// The hints.
const (
	// NodeLocal: every node runs its own copy; no lock.
	NodeLocal Hint = "node_local"
	// RequireGlobal: run only while holding the cluster-wide lock; skip the
	// tick when another node holds it or the backend is broken.
	RequireGlobal Hint = "require_global"
	// PreferGlobal: like RequireGlobal when a backend is configured, else
	// run node-local. The default.
	PreferGlobal Hint = "prefer_global"
)

// Default is the hint of a schedule that declares none.
const Default = PreferGlobal

// ErrUnknown is returned by Parse for a spelling that is not a hint.
var ErrUnknown = errors.New("hints: unknown hint")

// ErrNoBackend is returned by Resolve for require_global without a backend.
var ErrNoBackend = errors.New("hints: require_global needs a lock backend")

// Parse reads a hint's TOML spelling; "" means Default.
func Parse(s string) (Hint, error) {
	switch h := Hint(s); h {
	case "":
		return Default, nil
	case NodeLocal, RequireGlobal, PreferGlobal:
		return h, nil
	}
	return "", fmt.Errorf("%w %q (want node_local, require_global or prefer_global)", ErrUnknown, s)
}

// Backend is what a node has to lock with.
type Backend int

// Backend kinds.
const (
	// None: no [locking] backend configured.
	None Backend = iota
	// Local: the in-process memory backend; locks only this process.
	Local
	// Distributed: Redis or Postgres; locks the whole cluster.
	Distributed
)

// Resolution is what a hint means on a node.
type Resolution struct {
	Lock bool // take the cluster-wide lock before running
	// Why explains the resolution in a phrase, for `next` and logs.
	Why string
	// Warning is non-empty when the resolution is allowed but probably not
	// what the operator wants (require_global on the memory backend).
	Warning string
}

// Resolve says what h means given backend b. require_global without a
// backend is an error (a config error at startup, never at the first tick).
func Resolve(h Hint, b Backend) (Resolution, error) {
	switch h {
	case NodeLocal:
		return Resolution{Lock: false, Why: "node_local: every node runs it"}, nil
	case RequireGlobal:
		switch b {
		case None:
			return Resolution{}, ErrNoBackend
		case Local:
			return Resolution{Lock: true, Why: "require_global: locked on the memory backend",
				Warning: "require_global on the memory backend locks this process only, not the cluster"}, nil
		}
		return Resolution{Lock: true, Why: "require_global: cluster-wide lock"}, nil
	case PreferGlobal:
		if b == None {
			return Resolution{Lock: false, Why: "prefer_global: no backend, runs node-local"}, nil
		}
		if b == Local {
			return Resolution{Lock: true, Why: "prefer_global: locked on the memory backend (this process only)"}, nil
		}
		return Resolution{Lock: true, Why: "prefer_global: cluster-wide lock"}, nil
	}
	return Resolution{}, fmt.Errorf("%w %q", ErrUnknown, string(h))
}
