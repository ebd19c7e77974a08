package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"
	"unsafe"

	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
)

// ErrDuplicateID is wrapped (with ErrInvalid) by the error for a schedule
// whose id is already taken: twice in a set given to New or Reload, or an
// id Add finds live.
var ErrDuplicateID = errors.New("scheduler: duplicate schedule id")

// compile validates a schedule set and resolves what can be resolved once.
// Warnings (require_global on the memory backend) are logged, one line per
// kind of warning, however many schedules it concerns.
func (s *Scheduler) compile(schedules []Schedule) ([]*compiled, error) {
	var errs []error
	warned := map[string][]string{}
	seen := make(map[string]struct{}, len(schedules))
	now := s.clock.Now()
	out := make([]*compiled, 0, len(schedules))
	for i := range schedules {
		sc := &schedules[i]
		c, err := s.compileOne(i, sc, now, func(w string) { warned[w] = append(warned[w], sc.ID) })
		if _, dup := seen[sc.ID]; dup && sc.ID != "" {
			err = append(err, duplicate(i, sc.ID))
		}
		seen[sc.ID] = struct{}{}
		if len(err) > 0 {
			errs = append(errs, err...)
			continue
		}
		out = append(out, c)
	}
	// One count per group: a group whose schedules disagree on it would
	// let the larger count overfill the smaller (the config forbids it;
	// a program building Schedules could do it).
	groupMax := map[string]int{}
	for i := range schedules {
		sc := &schedules[i]
		if sc.Group == "" {
			continue
		}
		if k, ok := groupMax[sc.Group]; ok && k != sc.GroupMax {
			errs = append(errs, invalid(i, sc.ID, fmt.Errorf("group %q has max_running %d here and %d on another schedule", sc.Group, sc.GroupMax, k)))
		}
		groupMax[sc.Group] = sc.GroupMax
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s.logWarnings(warned)
	return out, nil
}

func (s *Scheduler) logWarnings(warned map[string][]string) {
	for w, ids := range warned {
		sample := ids[:min(len(ids), 5)]
		s.log.Warn(w, slog.Int("schedules", len(ids)), slog.String("ids", strings.Join(sample, ",")))
	}
}

// invalid is the error for schedule i (its position in the set, for one
// without an id) of id: it wraps ErrInvalid and err.
func invalid(i int, id string, err error) error {
	name := fmt.Sprintf("schedule %q", id)
	if id == "" {
		name = fmt.Sprintf("schedule #%d", i+1)
	}
	return fmt.Errorf("%w: %s: %w", ErrInvalid, name, err)
}

// duplicate is the error for schedule i whose id is taken.
func duplicate(i int, id string) error {
	return invalid(i, id, fmt.Errorf("duplicate id: %w", ErrDuplicateID))
}

// compileOne validates schedule sc, the i-th of its set, and compiles it;
// it reports every problem of it. warn receives the warning its hint
// resolved with, if any. Only the caller of a failing schedule pays for
// the error's text.
func (s *Scheduler) compileOne(i int, sc *Schedule, now time.Time, warn func(string)) (*compiled, []error) {
	var errs []error
	bad := func(err error) { errs = append(errs, invalid(i, sc.ID, err)) }
	if err := locking.CheckKey(sc.ID); err != nil {
		bad(fmt.Errorf("id is not a valid lock key: %w", err))
	}
	spec, expr := sc.Spec, sc.CronExpr
	var loc *time.Location
	if spec == nil {
		sp, shared, err := cronspec.ParseShared(sc.CronExpr, sc.Location)
		if err != nil {
			bad(err)
		}
		spec, expr, loc = sp, shared, orUTC(sc.Location)
	}
	spec = cronspec.ApplySpread(spec, sc.ID, sc.Spread) // a no-op when the spec carries its offset
	// A calendar whose end has passed fires no more, as it was meant to:
	// not an invalid schedule (a node reloading after the end would
	// refuse its whole config).
	if spec != nil && spec.Next(now).IsZero() && !cronspec.Ended(spec, now) {
		bad(fmt.Errorf("cron expression %q never fires", sc.CronExpr))
	}
	if sc.Job == nil {
		bad(errors.New("no job"))
	}
	k := keyOf(sc, s.opts.Tags)
	switch k.Overlap {
	case OverlapSkip, OverlapAllow, OverlapQueue, OverlapReplace:
	default:
		bad(fmt.Errorf("overlap %q is not %q, %q, %q or %q", sc.Overlap, OverlapSkip, OverlapAllow, OverlapQueue, OverlapReplace))
	}
	for _, d := range [...]struct {
		name string
		v    time.Duration
	}{{"expected_runtime", sc.ExpectedRuntime}, {"jitter", sc.Jitter}, {"timeout", sc.Timeout}} {
		if d.v < 0 {
			bad(fmt.Errorf("%s is negative (%v)", d.name, d.v))
		}
	}
	if k.Group != "" {
		switch {
		case s.opts.Locker == nil:
			bad(fmt.Errorf("group %q needs a lock backend: the group's count is kept there", k.Group))
		case !canTryLock(s.opts.Locker):
			bad(fmt.Errorf("group %q: the lock backend cannot take plain locks (TryLock), which a group's slots are", k.Group))
		case k.GroupMax < 1 || k.GroupMax > locking.MaxSlots:
			bad(fmt.Errorf("group %q: max_running %d, want 1 to %d", k.Group, k.GroupMax, locking.MaxSlots))
		default:
			if err := locking.CheckKey(locking.SlotKey(k.Group, k.GroupMax-1)); err != nil {
				bad(fmt.Errorf("group %q: %w", k.Group, err))
			}
		}
	} else if k.GroupWait {
		bad(errors.New("group_wait without a group"))
	}
	res, err := hints.Resolve(k.Hint, s.opts.Backend)
	if err != nil {
		bad(err)
	} else if res.Warning != "" && warn != nil {
		warn(res.Warning)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	p := s.policies[k]
	if p == nil {
		p = &policy{policyKey: k, lock: res.Lock,
			ttl: LockTTL(k.ExpectedRuntime, k.Jitter, s.opts.SafetyMargin, s.opts.MaxClockSkew)}
		s.policies[k] = p
	}
	return &compiled{ID: sc.ID, CronExpr: expr, Spec: spec, Job: sc.Job, policy: p, loc: loc}, nil
}

func orUTC(loc *time.Location) *time.Location {
	if loc == nil {
		return time.UTC
	}
	return loc
}

// keyOf is sc's options with their defaults filled in, on a node with
// tags.
func keyOf(sc *Schedule, tags []string) policyKey {
	k := policyKey{
		Hint: sc.Hint, ExpectedRuntime: sc.ExpectedRuntime, MinRuntime: sc.MinRuntime, Jitter: sc.Jitter, Timeout: sc.Timeout,
		Overlap: sc.Overlap, CatchupWindow: sc.CatchupWindow, Spread: sc.Spread, Retries: sc.Retries,
		RetryBackoff: sc.RetryBackoff, PauseAfterFailures: sc.PauseAfterFailures,
		Targeted: len(sc.Nodes) > 0, Elsewhere: !Matches(sc.Nodes, tags),
		Group: sc.Group, GroupMax: sc.GroupMax, GroupWait: sc.GroupWait,
	}
	if k.Overlap == "" {
		k.Overlap = OverlapSkip
	}
	if k.ExpectedRuntime == 0 {
		k.ExpectedRuntime = DefaultExpectedRuntime
	}
	if k.Hint == "" {
		k.Hint = hints.Default
	}
	return k
}

// change is how a Schedule differs from the definition compiled for its id.
type change uint8

const (
	changeNone change = iota // nothing: the definition stands
	changeJob                // only the job value: the definition with the new job stands
	changeAll                // anything else: compile it again
)

// changeOf compares sc with def, compiled for the same id, without
// compiling sc: what Reload does for every schedule of the set, so it
// costs a few comparisons. It may answer changeAll for a schedule that
// compiles to the same definition (a spec it cannot compare), never the
// reverse.
func changeOf(def *compiled, sc *Schedule, tags []string) change {
	if def.CronExpr != sc.CronExpr || def.policyKey != keyOf(sc, tags) || !sameSpec(def, sc) {
		return changeAll
	}
	if sc.Job == nil {
		return changeAll // compile reports it
	}
	if !sameJob(def.Job, sc.Job) {
		return changeJob
	}
	return changeNone
}

// sameSpec reports whether sc's spec, spread applied, is def's.
func sameSpec(def *compiled, sc *Schedule) bool {
	raw := sc.Spec
	if raw == nil {
		// The same expression (compared by the caller) in the same zone
		// parses to the same spec, and the same spread (in the policy)
		// moves it by the same offset.
		return def.loc != nil && def.loc == orUTC(sc.Location)
	}
	if equal(def.Spec, raw) {
		// The spread left raw as it was then (sameSpec is called with
		// equal policies, so with the same spread), and leaves it now.
		return true
	}
	off := cronspec.Offset(def.Spec)
	return off != 0 && sc.Spread > 0 && cronspec.Offset(raw) == 0 && equal(cronspec.Base(def.Spec), raw) &&
		off == cronspec.SpreadOffset(sc.ID, sc.Spread)
}

// sameTiming reports whether two definitions of a schedule fire at the
// same times, so Reload can keep its next tick.
func sameTiming(a, b *compiled) bool {
	if a.Elsewhere != b.Elsewhere {
		return false // it starts or stops firing here
	}
	if equal(a.Spec, b.Spec) {
		return true
	}
	// The same expression under another calendar (except, start, end)
	// fires at other times.
	if a.CronExpr == "" || a.CronExpr != b.CronExpr || a.Spread != b.Spread ||
		cronspec.CalendarText(a.Spec) != cronspec.CalendarText(b.Spec) {
		return false
	}
	la, lb := cronspec.Location(a.Spec), cronspec.Location(b.Spec)
	return la != nil && lb != nil && la.String() == lb.String()
}

// sameJob reports whether a and b are the same job. A JobFunc is not
// comparable in Go; two holding the same function value (the same closure,
// or the same top-level function) are the same job, compared by the
// pointer a func value is. Two closures made apart count as different,
// which costs Reload a copy of the definition, never a wrong one.
func sameJob(a, b Job) bool {
	if fa, ok := a.(JobFunc); ok {
		fb, ok := b.(JobFunc)
		return ok && *(*unsafe.Pointer)(unsafe.Pointer(&fa)) == *(*unsafe.Pointer)(unsafe.Pointer(&fb))
	}
	return equal(a, b)
}

// equal is a == b for values of any dynamic type: false, instead of a
// panic, when the type is not comparable (a Job or Spec holding a slice or
// a map, directly or in a field).
func equal(a, b any) (eq bool) {
	if a == nil || b == nil {
		return a == b
	}
	ta := reflect.TypeOf(a)
	if ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	defer func() {
		if recover() != nil {
			eq = false // an interface field holding an incomparable value
		}
	}()
	return a == b
}
