package cronspec_test

import (
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
)

// BenchmarkSpecNext: the cost of one Spec.Next, which the scheduler pays
// once per tick per schedule (and the heap rebuild once per schedule at
// start and reload). Each step advances from the previous tick, restarting
// every 1,000 ticks so the times stay within a few years.
func BenchmarkSpecNext(b *testing.B) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, bc := range []struct {
		name string
		expr string
		loc  *time.Location
	}{
		{"daily-utc", "0 3 * * *", nil},
		{"daily-paris", "30 2 * * *", paris},
		{"every-5-min-paris", "*/5 * * * *", paris},
		{"seconds-paris", "*/1 * * * * *", paris},
		{"weekdays-paris", "0 9 * * 1-5", paris},
		{"every-90s", "@every 90s", nil},
		// The calendar forms: robfig's search plus the day filter's jump.
		{"last-day-paris", "0 3 L * *", paris},
		{"last-friday-paris", "30 2 * * 5L", paris},
		{"every-5-min-lw-paris", "*/5 * LW * *", paris},
	} {
		b.Run(bc.name, func(b *testing.B) {
			spec, err := cronspec.Parse(bc.expr, bc.loc)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			t := start
			for i := 0; b.Loop(); i++ {
				if i%1000 == 0 {
					t = start
				}
				t = spec.Next(t)
			}
		})
	}
}

// BenchmarkSpecNextExcept: a daily spec with a calendar of except dates,
// across a year of them.
func BenchmarkSpecNextExcept(b *testing.B) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		b.Fatal(err)
	}
	spec, err := cronspec.Parse("0 3 * * *", paris)
	if err != nil {
		b.Fatal(err)
	}
	spec, err = cronspec.WithCalendar(spec, cronspec.Calendar{Except: []string{"*-01-01", "*-05-01", "*-07-14", "*-12-25", "2026-04-06"}})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	t := start
	for i := 0; b.Loop(); i++ {
		if i%365 == 0 {
			t = start
		}
		t = spec.Next(t)
	}
}
