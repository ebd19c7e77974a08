package cronspec_test

import (
	"fmt"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
)

// Daylight saving as examples/jobs/paris-opening.toml describes it: with a
// fixed hour, a local time the spring change skips runs at the first
// instant after the gap, and one the autumn change repeats runs once; with
// a stepped hour, every real instant whose wall clock matches fires.
func ExampleParse_daylightSaving() {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		panic(err)
	}
	show := func(expr string, from time.Time, n int) {
		spec, err := cronspec.Parse(expr, paris)
		if err != nil {
			panic(err)
		}
		fmt.Print(expr, ":")
		for t := from; n > 0; n-- {
			t = spec.Next(t)
			fmt.Print(" ", t.In(paris).Format("01-02 15:04 MST"))
		}
		fmt.Println()
	}
	spring := time.Date(2026, 3, 28, 12, 0, 0, 0, paris)
	autumn := time.Date(2026, 10, 24, 12, 0, 0, 0, paris)
	show("30 2 * * *", spring, 2)                                       // 02:30 does not exist on 03-29
	show("30 2 * * *", autumn, 2)                                       // 02:30 happens twice on 10-25: once
	show("30 */1 * * *", time.Date(2026, 10, 25, 1, 0, 0, 0, paris), 3) // twice in the repeated hour
	// Output:
	// 30 2 * * *: 03-29 03:00 CEST 03-30 02:30 CEST
	// 30 2 * * *: 10-25 02:30 CEST 10-26 02:30 CET
	// 30 */1 * * *: 10-25 01:30 CEST 10-25 02:30 CEST 10-25 02:30 CET
}
