package ops

import (
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
)

func TestLastTickAtOrBefore(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 10, 12, 34, 56, 0, time.UTC)
	for _, c := range []struct {
		cron string
		want time.Time
	}{
		{"*/1 * * * * *", at},
		{"*/5 * * * *", time.Date(2026, 3, 10, 12, 30, 0, 0, time.UTC)},
		{"0 3 * * *", time.Date(2026, 3, 10, 3, 0, 0, 0, time.UTC)},
		{"0 0 29 2 *", time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)},
		{"* 0 * * *", time.Date(2026, 3, 10, 0, 59, 0, 0, time.UTC)},
	} {
		spec, err := cronspec.Parse(c.cron, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		if got := lastTickAtOrBefore(spec, at); !got.Equal(c.want) {
			t.Errorf("%q: last tick at or before %s = %s, want %s", c.cron, at, got, c.want)
		}
	}
}
