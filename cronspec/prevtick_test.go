package cronspec

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Prev probes back from the spec's shortest period instead of from a
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
		spec, err := Parse(expr, paris)
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
				if got := Prev(spec, now, limit); !got.Equal(want) {
					t.Fatalf("%q at %v, limit %v: Prev %v, want %v", expr, now, limit, got, want)
				}
			}
		}
	}
}

// BenchmarkPrevTick: scheduler.Tick.PrevTime of a daily schedule's run, which every
// run computes (limit: a one-day window plus an hour, as the scheduler's runJob asks).
func BenchmarkPrevTick(b *testing.B) {
	spec, err := Parse("0 3 * * *", nil)
	if err != nil {
		b.Fatal(err)
	}
	tick := time.Date(2026, 5, 4, 3, 0, 0, 0, time.UTC)
	for b.Loop() {
		Prev(spec, tick.Add(-time.Nanosecond), 25*time.Hour)
	}
}

// hiddenSpec hides a spec's type, so its period is unknown (a Spec of
// the embedder's own), and counts its Next calls.
type hiddenSpec struct {
	Spec
	calls *int
}

func (h hiddenSpec) Next(t time.Time) time.Time {
	*h.calls++
	return h.Spec.Next(t)
}

// onceAt fires once, at at.
type onceAt struct{ at time.Time }

func (o onceAt) Next(t time.Time) time.Time {
	if t.Before(o.at) {
		return o.at
	}
	return time.Time{}
}

// A spec of unknown period with no tick before now is answered after one
// Next, not one per doubling; one with ticks finds the same tick as
// before.
func TestPrevTickOfUnknownPeriod(t *testing.T) {
	var calls int
	at := time.Date(2026, 5, 4, 3, 0, 0, 0, time.UTC)
	once := hiddenSpec{onceAt{at}, &calls}
	if got := Prev(once, at.Add(-time.Nanosecond), time.Hour); !got.IsZero() {
		t.Fatalf("Prev of a once spec before its tick: %v, want none", got)
	}
	if calls != 1 {
		t.Errorf("%d Next calls for a once spec before its tick, want 1", calls)
	}
	if got := Prev(once, at.Add(time.Minute), time.Hour); !got.Equal(at) {
		t.Errorf("Prev of a once spec after its tick: %v, want %v", got, at)
	}
	for _, expr := range []string{"*/7 * * * * *", "0 3 * * *", "@every 90s"} {
		spec, err := Parse(expr, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []time.Duration{time.Minute, 25 * time.Hour} {
			for k := range 50 {
				now := at.Add(time.Duration(k) * 37 * time.Minute)
				want := Prev(spec, now, limit)
				if got := Prev(hiddenSpec{spec, &calls}, now, limit); !got.Equal(want) {
					t.Fatalf("%q at %v, limit %v, period unknown: %v, want %v", expr, now, limit, got, want)
				}
			}
		}
	}
}
