package scheduler

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Spec computes a schedule's fire times. It is robfig/cron's Schedule:
// Next returns the first fire time strictly after t.
type Spec interface {
	Next(t time.Time) time.Time
}

// specParser accepts 5 fields, an optional leading seconds field, and the
// descriptors (@hourly, @daily, @every 90s, ...), with CRON_TZ=/TZ= prefixes.
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
	cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSpec parses a cron expression evaluated in loc (nil means UTC). A
// CRON_TZ= or TZ= prefix in expr wins over loc.
//
// `@every D` is aligned to the Unix epoch (ticks at whole multiples of D), not
// to the moment the process started as in robfig/cron: every node must compute
// the same tick times or the cluster lock cannot tell one tick from another.
func ParseSpec(expr string, loc *time.Location) (Spec, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, fmt.Errorf("scheduler: empty cron expression")
	}
	if loc == nil {
		loc = time.UTC
	}
	if !strings.HasPrefix(expr, "CRON_TZ=") && !strings.HasPrefix(expr, "TZ=") {
		expr = "CRON_TZ=" + loc.String() + " " + expr
	}
	s, err := specParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("scheduler: cron expression: %w", err)
	}
	if d, ok := s.(cron.ConstantDelaySchedule); ok {
		return everySpec{d.Delay}, nil
	}
	return s, nil
}

// everySpec fires at whole multiples of every since the Unix epoch.
type everySpec struct{ every time.Duration }

func (e everySpec) Next(t time.Time) time.Time {
	n := t.UnixNano()
	step := int64(e.every)
	next := n - n%step + step
	if n < 0 && n%step != 0 { // times before 1970 round toward zero above
		next -= step
	}
	return time.Unix(0, next).In(t.Location())
}
