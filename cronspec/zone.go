package cronspec

import (
	"sync"
	"time"
)

// zones caches LoadLocation: name → *time.Location.
var zones sync.Map

// LoadLocation is time.LoadLocation, cached for the life of the process: every
// schedule of a zone shares one *time.Location (a loaded zone holds several
// KB of transitions; a fleet of 100,000 schedules in Europe/Paris held one
// copy each). Zone data updated on disk while the process runs is seen by
// the next process, not by a reload. Errors are not cached.
func LoadLocation(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return time.Local, nil
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	actual, _ := zones.LoadOrStore(name, loc)
	return actual.(*time.Location), nil
}
