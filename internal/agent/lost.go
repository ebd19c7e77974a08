package agent

import "time"

// lostTicks remembers the lost ticks the audit found, so that each is told
// once: a lost tick stays lost, and in the audited window, for as long as
// LostSpan (15 minutes, or two ticks of a slow schedule), and the audit
// runs every minute.
type lostTicks map[string]map[time.Time]bool

// tell calls f for each tick of found not told before, then forgets the
// told ticks that found no longer has, when found is complete (an audit
// that failed for some schedules says nothing of theirs): a tick leaves
// the window for good. A node that starts auditing a schedule (another
// left, or joined) tells its lost ticks again: once per auditor, a few
// times in a cluster's life, rather than never.
func (l *lostTicks) tell(found map[string][]time.Time, complete bool, f func(string, time.Time)) {
	if *l == nil {
		*l = lostTicks{}
	}
	for id, ticks := range found {
		told := (*l)[id]
		if told == nil {
			told = map[time.Time]bool{}
			(*l)[id] = told
		}
		for _, t := range ticks {
			t = t.UTC() // one key per instant, whatever zone the backend answered in
			if told[t] {
				continue
			}
			told[t] = true
			if f != nil {
				f(id, t)
			}
		}
	}
	if !complete {
		return
	}
	for id, told := range *l {
		now := map[time.Time]bool{}
		for _, t := range found[id] {
			now[t.UTC()] = true
		}
		for t := range told {
			if !now[t] {
				delete(told, t)
			}
		}
		if len(told) == 0 {
			delete(*l, id)
		}
	}
}
