package scheduler

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
)

// Changing the schedule set of a running scheduler: Reload (the whole set,
// as a SIGHUP gives it) and Add and Remove (one schedule, for programs
// that embed the scheduler). All three keep what is in flight: a running
// tick of a removed or changed schedule finishes under the definition it
// fired with, and the locks it holds are released as usual.
//
// Reload costs what changed, not what the set holds: it compares each
// schedule with the definition compiled for its id (a map lookup and a few
// comparisons) and compiles only the new and changed ones. With 100,000
// schedules, adding one took 340 ms when every schedule was compiled again.

// reloadChunk bounds the schedules Reload compares while holding mu, so
// the loop and finishing ticks never wait for a whole large set.
const reloadChunk = 4096

// Reload replaces the schedule set: schedules are matched by ID; new ones
// start firing, removed ones stop, changed ones fire by their new spec from
// now on (an unchanged one keeps its next tick, and a changed one keeps a
// tick due but not yet taken that its new spec has too, and runs its new
// spec's tick due at the reload: dueAtReloadLocked). A changed locked
// schedule gets the catch-up a start gets (reloadCatchUpLocked). Nothing
// in flight is dropped: a running tick of a removed or changed schedule
// finishes under the definition it fired with, and locks it holds
// (running or lingering) are kept and released as usual. An invalid set
// is refused whole (the error lists every problem, each wrapping
// ErrInvalid) and the old set keeps running.
func (s *Scheduler) Reload(schedules []Schedule) error {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	s.gen++
	gen := s.gen

	// Compare the set with the live schedules, under mu a chunk at a time.
	// Only holders of cfgMu change which schedules are live or their
	// definitions, so what this finds holds until the end.
	//
	// A set given again is mostly the same schedules in the same order,
	// so each is first looked for where the last set had it (s.order),
	// one step further on (a schedule taken out before it), and only then
	// in the map: a walk through memory laid out in that order, instead
	// of a hash lookup landing anywhere. What the walk passed over is
	// where the schedules the set no longer names are.
	var (
		errs   []indexedErr
		todo   []int // new, re-added or changed: compile
		swaps  []int // another job value only
		fresh  map[string]struct{}
		old    = s.order
		j      int           // the walk's place in old
		passed []*schedState // old's entries the walk stepped over
		order  = make([]*schedState, len(schedules))
	)
	for lo := 0; lo < len(schedules); lo += reloadChunk {
		s.mu.Lock()
		for i := lo; i < min(lo+reloadChunk, len(schedules)); i++ {
			sc := &schedules[i]
			var st *schedState
			switch {
			case j < len(old) && old[j].id == sc.ID:
				st = old[j]
				j++
			case j+1 < len(old) && old[j+1].id == sc.ID:
				passed = append(passed, old[j])
				st = old[j+1]
				j += 2
			}
			if st == nil || st.removed {
				// Not where the last set had it, or a removed state the
				// map may have replaced since (Add): the map knows.
				st = s.states[sc.ID]
			}
			if st == nil || st.removed {
				if fresh == nil {
					fresh = map[string]struct{}{}
				}
				if _, dup := fresh[sc.ID]; dup && sc.ID != "" {
					errs = append(errs, indexedErr{i, duplicate(i, sc.ID)})
					continue
				}
				fresh[sc.ID] = struct{}{}
				todo = append(todo, i)
				continue
			}
			if st.gen == gen {
				errs = append(errs, indexedErr{i, duplicate(i, sc.ID)})
				continue
			}
			st.gen = gen
			order[i] = st
			switch changeOf(st.def, sc, s.opts.Tags) {
			case changeJob:
				swaps = append(swaps, i)
			case changeAll:
				todo = append(todo, i)
			}
		}
		s.mu.Unlock()
	}

	// Compile what is new or changed (off mu: this is the costly part).
	now := s.clock.Now()
	warned := map[string][]string{}
	defs := make([]*compiled, 0, len(todo)+len(swaps))
	for _, i := range todo {
		sc := &schedules[i]
		c, err := s.compileOne(i, sc, now, func(w string) { warned[w] = append(warned[w], sc.ID) })
		for _, e := range err {
			errs = append(errs, indexedErr{i, e})
		}
		if c != nil {
			defs = append(defs, c)
		}
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b indexedErr) int { return cmp.Compare(a.i, b.i) })
		joined := make([]error, len(errs))
		for k, e := range errs {
			joined[k] = e.err
		}
		return errors.Join(joined...)
	}
	s.logWarnings(warned)

	var notes []nextNote
	var added []*compiled
	var tries []action
	s.mu.Lock()
	for _, i := range swaps {
		// Same spec and options: the definition with the new job, which
		// the next tick runs; its next tick stands.
		st := s.states[schedules[i].ID]
		c := *st.def
		c.Job = schedules[i].Job
		st.def = &c
	}
	now = s.clock.Now()
	for k, c := range defs { // defs[k] is the schedule todo[k]: no errors
		st, old, keep := s.installLocked(c, gen)
		order[todo[k]] = st
		if old == nil {
			added = append(added, c)
		}
		was := st.next(now.Location()) // the old definition's next tick
		if n, ok := s.rescheduleLocked(st, old, was, now, keep); ok {
			notes = append(notes, n)
		}
		if old != nil {
			if tick := s.reloadCatchUpLocked(st, old, was, now); !tick.IsZero() {
				tries = append(tries, s.tryLateLocked(st, tick, now))
			}
		}
	}
	// Every live schedule is in old (New, Reload and Add put it there):
	// the ones not named are among those the walk passed over or never
	// reached.
	for _, group := range [][]*schedState{passed, old[j:]} {
		for _, st := range group {
			if !st.removed && st.gen != gen {
				notes = append(notes, nextNote{st.id, time.Time{}})
				s.removeLocked(st)
			}
		}
	}
	s.order = order
	if len(notes) > 0 {
		s.pokeLocked()
	}
	s.mu.Unlock()
	s.announce(notes, added)
	s.submitTries(tries)
	return nil
}

type indexedErr struct {
	i   int
	err error
}

// Add adds schedule sc to a scheduler, running or not, as a Reload of the
// set with sc added would: it starts firing by its spec from now on. A
// schedule already live with sc's id is an error wrapping ErrInvalid and
// ErrDuplicateID; an invalid sc is refused, each problem wrapping
// ErrInvalid. A schedule removed while a tick of it still runs may be
// added back: that run finishes under its old definition.
func (s *Scheduler) Add(sc Schedule) error {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	var warning string
	c, errs := s.compileOne(0, &sc, s.clock.Now(), func(w string) { warning = w })
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	s.mu.Lock()
	if st := s.states[sc.ID]; st != nil && !st.removed {
		s.mu.Unlock()
		return duplicate(0, sc.ID)
	}
	st, _, _ := s.installLocked(c, s.gen)
	s.appendOrderLocked(st)
	n, ok := s.rescheduleLocked(st, nil, time.Time{}, s.clock.Now(), false)
	if ok {
		s.pokeLocked()
	}
	s.mu.Unlock()
	if warning != "" {
		s.logWarnings(map[string][]string{warning: {sc.ID}})
	}
	var notes []nextNote
	if ok {
		notes = []nextNote{n}
	}
	s.announce(notes, []*compiled{c})
	return nil
}

// Remove removes the schedule id, as a Reload of the set without it would:
// it fires no more, and a tick of it in flight finishes under its lock. An
// id that is not live is an error wrapping ErrUnknownSchedule.
func (s *Scheduler) Remove(id string) error {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	s.mu.Lock()
	st := s.states[id]
	if st == nil || st.removed {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrUnknownSchedule, id)
	}
	s.removeLocked(st)
	s.pokeLocked()
	s.mu.Unlock()
	s.obs.NextTick(id, time.Time{})
	return nil
}

// appendOrderLocked files st, just made live by Add, at the end of s.order.
// Removed schedules stay in s.order until the next Reload; when they
// outnumber the live ones (a program that only adds and removes), they
// are dropped here.
func (s *Scheduler) appendOrderLocked(st *schedState) {
	if len(s.order) >= 2*s.nlive && len(s.order) >= 64 {
		s.order = slices.DeleteFunc(s.order, func(o *schedState) bool { return o.removed })
	}
	s.order = append(s.order, st)
}

// newState is the state of a schedule first compiled as c.
func newState(c *compiled) *schedState {
	st := &schedState{id: c.ID, def: c}
	st.fire = event{kind: eventFire, index: -1, st: st}
	return st
}

// installLocked makes c the live definition of its id, stamped with gen.
// old is the definition it replaces, nil when the id was not live (new,
// or removed and still busy); keep, that its next tick stands (same
// timing, already in the heap).
func (s *Scheduler) installLocked(c *compiled, gen uint32) (st *schedState, old *compiled, keep bool) {
	st = s.states[c.ID]
	isNew := false
	switch {
	case st == nil:
		st = newState(c)
		s.states[c.ID] = st
		isNew = true
	case st.removed:
		isNew = true
	}
	if isNew {
		s.nlive++
		st.removed = false
	} else {
		old = st.def
	}
	// An unchanged timing keeps the next tick: rescheduled from now, a
	// tick due but not yet popped by the loop would be lost.
	keep = !isNew && sameTiming(st.def, c) && st.fire.index >= 0
	st.def, st.gen = c, gen
	return st, old, keep
}

// rescheduleLocked files st's next tick by its new definition, which
// replaced old (nil: st is new) whose next tick was was, unless the
// scheduler is not running or keep says the tick stands; ok says it did.
func (s *Scheduler) rescheduleLocked(st *schedState, old *compiled, was, now time.Time, keep bool) (n nextNote, ok bool) {
	if keep || !s.started || s.stopping {
		return nextNote{}, false
	}
	if due := s.dueAtReloadLocked(st, old, was, now); !due.IsZero() {
		now = due.Add(-time.Nanosecond) // the loop fires it at once
	}
	return s.scheduleLocked(st, now), true
}

// dueAtReloadLocked returns the tick of st's new spec that is due at the
// reload and fires at once (zero: none; the new spec fires after now):
//   - a tick of the old definition that is due but that the loop has not
//     taken yet (was, reached), when the new spec has it too: scheduled
//     from now, it would belong to neither definition and run nowhere;
//   - for a changed schedule (old set), the new spec's latest tick at or
//     before now, within max_clock_skew of it (on time, as the catch-up
//     counts it), unless the old definition had that tick and the loop
//     took it already: scheduled from now alone, a spec changed at its
//     tick's instant would fire strictly after it, and the tick would
//     run nowhere.
//
// A tick the new spec lacks is not invented; a later one is the
// catch-up's (reloadCatchUpLocked).
func (s *Scheduler) dueAtReloadLocked(st *schedState, old *compiled, was, now time.Time) time.Time {
	if st.def.Elsewhere {
		return time.Time{}
	}
	spec := st.def.Spec
	if !was.IsZero() && !was.After(now) && spec.Next(was.Add(-time.Nanosecond)).Equal(was) {
		return was
	}
	if old == nil {
		return time.Time{}
	}
	t := cronspec.Prev(spec, now, s.opts.MaxClockSkew)
	if t.IsZero() || now.Sub(t) > s.opts.MaxClockSkew || tookBy(old, t, was) {
		return time.Time{}
	}
	return t
}

// reloadCatchUpLocked returns the tick of changed schedule st that the
// catch-up tries at the reload (zero: none), as at start
// (catchUpTickLocked): its new spec's latest tick within its window, not
// seen decided here. Left out: a tick the loop fires (at or after st's
// next tick: dueAtReloadLocked), and one the old definition had and the
// loop took already (run, skipped or missed under it, as it decided; with
// the same timing, nothing is ever tried again).
func (s *Scheduler) reloadCatchUpLocked(st *schedState, old *compiled, was, now time.Time) time.Time {
	if !s.started || s.stopping {
		return time.Time{} // Run's own catch-up covers a start
	}
	t := s.catchUpTickLocked(st, now)
	if t.IsZero() || tookBy(old, t, was) {
		return time.Time{}
	}
	if next := st.next(now.Location()); !next.IsZero() && !t.Before(next) {
		return time.Time{}
	}
	return t
}

// tookBy reports whether definition old, whose next tick in the heap was
// was (zero: none left), had tick t and its loop took it already.
func tookBy(old *compiled, t, was time.Time) bool {
	return old.Spec.Next(t.Add(-time.Nanosecond)).Equal(t) && (was.IsZero() || t.Before(was))
}

// removeLocked takes live st out of the set.
func (s *Scheduler) removeLocked(st *schedState) {
	st.removed = true
	s.nlive--
	if st.fire.index >= 0 {
		s.heap.remove(&st.fire)
	}
	s.forgetIfDoneLocked(st)
}

// announce reports next ticks (made under mu) and hands the locked
// schedules among added to the catch-up's mark creation.
func (s *Scheduler) announce(notes []nextNote, added []*compiled) {
	for _, n := range notes {
		s.obs.NextTick(n.id, n.next)
	}
	if len(added) > 0 {
		s.markLater(added)
		select {
		case s.backend.poke <- struct{}{}:
		default:
		}
	}
}
