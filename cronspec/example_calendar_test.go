package cronspec_test

import (
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
)

// The last weekday of the month, the second Monday, and a nightly job
// kept off Christmas and every New Year's Day.
func ExampleWithCalendar() {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		panic(err)
	}
	show := func(spec cronspec.Spec, n int) {
		for t := time.Date(2026, 12, 23, 12, 0, 0, 0, paris); n > 0; n-- {
			t = spec.Next(t)
			fmt.Print(" ", t.In(paris).Format("Mon 01-02 15:04"))
		}
		fmt.Println()
	}
	for _, expr := range []string{"0 18 LW * *", "0 9 * * MON#2"} {
		spec, err := cronspec.Parse(expr, paris)
		if err != nil {
			panic(err)
		}
		fmt.Print(expr, ":")
		show(spec, 3)
	}
	nightly, err := cronspec.Parse("0 3 * * *", paris)
	if err != nil {
		panic(err)
	}
	nightly, err = cronspec.WithCalendar(nightly, cronspec.Calendar{Except: []string{"2026-12-25", "*-01-01"}})
	if err != nil {
		panic(err)
	}
	fmt.Print("0 3 * * * except 2026-12-25, *-01-01:")
	show(nightly, 9)
	// Output:
	// 0 18 LW * *: Thu 12-31 18:00 Fri 01-29 18:00 Fri 02-26 18:00
	// 0 9 * * MON#2: Mon 01-11 09:00 Mon 02-08 09:00 Mon 03-08 09:00
	// 0 3 * * * except 2026-12-25, *-01-01: Thu 12-24 03:00 Sat 12-26 03:00 Sun 12-27 03:00 Mon 12-28 03:00 Tue 12-29 03:00 Wed 12-30 03:00 Thu 12-31 03:00 Sat 01-02 03:00 Sun 01-03 03:00
}
