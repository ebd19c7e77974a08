package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

func newNextCmd() *cobra.Command {
	var (
		path string
		n    int
		from string
	)
	c := &cobra.Command{
		Use:   "next",
		Short: "Show the upcoming ticks of every schedule, how each locks, and its lock TTL",
		Long: `next prints, for each schedule, its cron expression and the time zone it
fires in (timezone or the cron's CRON_TZ=), the locking hint as it resolves
with the configured backend (and why), the lock key and TTL (expected_runtime
+ jitter + safety_margin), its spread offset, and the next N tick times (the
spread offset included) in RFC 3339, in that zone. The cron's L, W and #
days, except, start and end are applied: an except date passed over is shown
once, at its first tick, marked "skipped: except"; a schedule past its end
shows "- (ended)". --from shows the ticks after an RFC 3339 time instead of
now: a daylight-saving night, say. It reads the config only; it does not
connect anywhere.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if n < 1 || n > 1000 {
				return usageErrorf("-n must be between 1 and 1000, got %d", n)
			}
			now := time.Now()
			if from != "" {
				t, err := time.Parse(time.RFC3339, from)
				if err != nil {
					return usageErrorf("--from %q is not an RFC 3339 time (such as 2026-10-25T00:00:00+02:00 or 2026-10-24T22:00:00Z)", from)
				}
				now = t
			}
			cfg, err := loadConfig(c.ErrOrStderr(), configPath(path))
			if err != nil {
				return err
			}
			kind := backendKind(cfg.Locking.Backend)
			w := tabwriter.NewWriter(c.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SCHEDULE\tCRON\tTZ\tHINT\tLOCK KEY\tTTL\tSPREAD\tNEXT")
			for _, s := range cfg.Scheduled {
				res, err := hints.Resolve(s.HintValue, kind)
				hint, key, ttl := string(s.HintValue), "-", "-"
				if err != nil {
					hint += " (" + err.Error() + ")"
				} else {
					hint = res.Why
					if res.Lock {
						key = lockKeyDisplay(cfg.Locking.Backend, cfg.Locking.Redis.KeyPrefix, cfg.Locking.PG.Namespace, s.ID)
						ttl = scheduler.LockTTL(s.ExpectedRuntime.Duration, s.Jitter.Duration,
							cfg.Locking.SafetyMargin.Duration, cfg.Locking.MaxClockSkew.Duration).String()
					}
				}
				loc := time.UTC
				if s.Location != nil { // the zone that fires: timezone or CRON_TZ=
					loc = s.Location
				}
				spread := "-"
				if s.Spread.Duration > 0 {
					spread = "+" + s.Offset.String() + " of " + s.Spread.Duration.String()
				}
				ticks := nextTicks(s.Spec, now, n, loc)
				first := "-"
				if len(ticks) > 0 {
					first = ticks[0]
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", safe(s.ID), safe(s.Cron), loc, hint, safe(key), ttl, spread, first)
				for _, t := range ticks[min(1, len(ticks)):] {
					fmt.Fprintf(w, "\t\t\t\t\t\t\t%s\n", t)
				}
			}
			return w.Flush()
		},
	}
	addConfigFlag(c, &path)
	c.Flags().IntVarP(&n, "count", "n", 3, "how many upcoming ticks per schedule")
	c.Flags().StringVar(&from, "from", "", "show the ticks after this RFC 3339 time instead of now")
	return c
}

// nextTicks formats spec's next n ticks after from, in loc, with the
// except dates it passes over among them: each once, at its first tick
// the calendar took away, marked "skipped: except". A schedule past its
// end says so.
func nextTicks(spec cronspec.Spec, from time.Time, n int, loc *time.Location) []string {
	var ticks []time.Time
	t := from
	for i := 0; i < n && spec != nil; i++ {
		t = spec.Next(t)
		if t.IsZero() { // robfig returns zero for a schedule that never fires
			break
		}
		ticks = append(ticks, t)
	}
	var skipped []time.Time
	if all, excepted, ok := cronspec.Excepted(spec); ok && len(ticks) > 0 {
		last, seen := ticks[len(ticks)-1], ""
		// Bounded: a schedule firing every second walks a day's 86,400
		// ticks per excepted date.
		for t, k := all.Next(from), 0; !t.IsZero() && t.Before(last) && k < maxNextWalk; t, k = all.Next(t), k+1 {
			if day := t.In(loc).Format(time.DateOnly); excepted(t) && day != seen {
				skipped, seen = append(skipped, t), day
			}
		}
	}
	var out []string
	for _, t := range ticks {
		for len(skipped) > 0 && skipped[0].Before(t) {
			out = append(out, skipped[0].In(loc).Format(time.RFC3339)+" skipped: except")
			skipped = skipped[1:]
		}
		out = append(out, t.In(loc).Format(time.RFC3339))
	}
	if len(ticks) == 0 && cronspec.Ended(spec, from) {
		out = append(out, "- (ended)")
	}
	return out
}

// maxNextWalk bounds the ticks nextTicks walks for the except dates.
const maxNextWalk = 1_000_000

// lockKeyDisplay shows the key as the backend stores it.
func lockKeyDisplay(backend, redisPrefix, pgNamespace, id string) string {
	switch backend {
	case "redis":
		return redisPrefix + "{" + id + "}"
	case "pg":
		return strings.TrimSpace(pgNamespace) + ":" + id
	}
	return id
}
