package scheduler

import (
	"math/rand/v2"
	"testing"
	"time"
)

// prevTick probes back from the spec's shortest period instead of from a
// second: it must find the same latest tick, wherever one lies within the
// limit (DST changes in Paris included).
func TestPrevTickFromThePeriodFindsTheSameTick(t *testing.T) {
	paris, err := LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	naive := func(spec Spec, now time.Time, limit time.Duration) time.Time {
		for d := time.Second; ; d *= 2 { // the search before probeStart
			if t := spec.Next(now.Add(-d)); !t.IsZero() && !t.After(now) {
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
	r := rand.New(rand.NewPCG(3, 4))
	start := time.Date(2026, 3, 20, 0, 0, 0, 0, time.UTC) // the spring change lies ahead
	for _, expr := range []string{"0 3 * * *", "30 2 * * *", "0 9 * * 1-5", "*/5 * * * *", "@every 90s", "15 4 1 * *"} {
		spec, err := ParseSpec(expr, paris)
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []time.Duration{time.Minute, 25 * time.Hour, 40 * 24 * time.Hour} {
			for range 300 {
				now := start.Add(time.Duration(r.Int64N(int64(250 * 24 * time.Hour))))
				want := naive(spec, now, limit)
				if want.IsZero() || now.Sub(want) > limit {
					continue // beyond the limit the answer may be zero
				}
				if got := prevTick(spec, now, limit); !got.Equal(want) {
					t.Fatalf("%q at %v, limit %v: prevTick %v, want %v", expr, now, limit, got, want)
				}
			}
		}
	}
}

// BenchmarkPrevTick: Tick.PrevTime of a daily schedule's run, which every
// run computes (limit: a one-day window plus an hour, as runJob asks).
func BenchmarkPrevTick(b *testing.B) {
	spec, err := ParseSpec("0 3 * * *", nil)
	if err != nil {
		b.Fatal(err)
	}
	tick := time.Date(2026, 5, 4, 3, 0, 0, 0, time.UTC)
	for b.Loop() {
		prevTick(spec, tick.Add(-time.Nanosecond), 25*time.Hour)
	}
}
