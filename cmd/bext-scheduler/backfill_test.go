package main

import (
	"regexp"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
)

// TestBackfillPastTheMarkRefused: a backfill whose --to lies ahead (the
// range holds ticks its regular run has not claimed yet) is a usage error
// naming the latest tick a backfill may run: the tick the schedule's mark
// is at, never past now. Nothing is queued and nothing runs as manual; up
// to that tick the backfill is accepted.
func TestBackfillPastTheMarkRefused(t *testing.T) {
	t.Parallel()
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			c := newOpsCluster(t, lockingTOML, st, `
[[scheduled]]
id = "bf"
cron = "*/5 * * * * *"
hint = "require_global"
expected_runtime = "1s"
command = ["/bin/sh", "-c", '@JOB@']
`)
			c.start("node-1", "")
			var seen time.Time
			waitFor(t, "a regular run of bf", 30*time.Second, func() bool {
				for _, r := range c.jobRuns("bf") {
					seen = r.Tick
				}
				return !seen.IsZero()
			})
			from := seen.Add(-time.Minute).UTC().Format(time.RFC3339)
			r := cli(t, c.cfg, exitUsage, "backfill", "bf", "--from", from, "--to", time.Now().Add(time.Minute).UTC().Format(time.RFC3339))
			m := regexp.MustCompile(`latest tick a backfill may run is (\S+)`).FindStringSubmatch(r.Stderr)
			if m == nil {
				t.Fatalf("backfill up to a minute ahead: the error names no latest tick:\n%s", r.Stderr)
			}
			latest, err := time.Parse(time.RFC3339, m[1])
			if err != nil {
				t.Fatalf("latest tick %q: %v", m[1], err)
			}
			if latest.Before(seen) || latest.After(time.Now()) || latest.Second()%5 != 0 {
				t.Errorf("latest tick %s: want a tick of bf between the one seen run (%s) and now", m[1], seen.Format(time.RFC3339))
			}
			if q, err := st.Requests(t.Context(), "bf"); err != nil || len(q) != 0 {
				t.Errorf("a refused backfill queued %+v, %v", q, err)
			}
			r = cli(t, c.cfg, 0, "backfill", "bf", "--from", from, "--to", m[1])
			if !regexp.MustCompile(`queued \d+ ticks of bf`).MatchString(r.Stdout) {
				t.Errorf("backfill up to the latest tick: %s", r.Stdout)
			}
		})
	}
}
