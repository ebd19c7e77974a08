// Package cronspec turns a schedule's cron expression into its fire times:
// parsing (robfig/cron/v3, plus epoch-aligned @every and CRON_TZ=/TZ=
// prefixes), time zones, daylight saving as cronie handles it, and the
// stable per-schedule spread offset. It needs none of the tick engine's
// state, so config, internal/ops and the `next` command import it instead
// of the scheduler, and every one of them computes the same ticks.
//
// The spread is applied in one place: ApplySpread (config, the scheduler
// and ops' backfill and drift all call it), built on SpreadOffset and
// WithOffset.
//
//   - spec.go: Spec, Parse (cron expressions, @every, daylight saving), CronTZ, Location.
//   - days.go: the day fields' L, W and # (Quartz's forms), which robfig/cron lacks.
//   - calendar.go: WithCalendar (a schedule's except, start, end), Excepted, Ended.
//   - spread.go: WithOffset, SpreadOffset, ApplySpread, MinPeriod.
//   - prev.go: Prev, a spec's latest tick at or before a time.
//   - zone.go: LoadLocation, a cache of time.LoadLocation.
package cronspec
