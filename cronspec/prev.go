package cronspec

import "time"

// Prev returns spec's latest tick at or before now, if one lies within
// limit of now (zero otherwise). It probes back from now in doubling steps,
// from the spec's shortest period, so a long window costs a few Next
// calls, not one per tick.
//
// A spec of unknown period (a Spec of the embedder's own) is first probed
// once from as far back as the doubling would reach: a spec with no tick
// there (one that fires once, and fired) answered after a Next per
// doubling from a second, a dozen for an hour, and every run asks
// (scheduler.Tick.PrevTime). Next never goes back as its argument moves forward,
// so with no tick after the farthest probe there is none after any.
func Prev(spec Spec, now time.Time, limit time.Duration) time.Time {
	start := probeStart(spec, limit)
	if knownPeriod(spec) == 0 {
		far := start
		for far <= limit {
			far *= 2
		}
		if t := spec.Next(now.Add(-far)); t.IsZero() || t.After(now) {
			return time.Time{}
		}
	}
	for d := start; ; d *= 2 {
		t := spec.Next(now.Add(-d))
		if !t.IsZero() && !t.After(now) {
			for {
				n := spec.Next(t)
				if n.IsZero() || n.After(now) {
					return t
				}
				t = n
			}
		}
		if d > limit {
			return time.Time{}
		}
	}
}
