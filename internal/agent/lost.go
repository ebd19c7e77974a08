package agent

import "time"

// lostTicks remembers the lost ticks the audit found, so that each is told
// once: a lost tick stays lost, and in the audited window, for as long as
// LostSpan (15 minutes, or two ticks of a slow schedule), and the audit
// runs every AuditEvery.
//
// A tick is told the second time an audit in a row finds it lost, not the
// first: a tick decided late (a catch-up, or ticks a node stopped for a
// while passed over, recorded stopped when it resumed) is older than
// AuditGrace when it is decided, and reads lost until its record lands, a
// fraction of a second later. Two audits are at least a second apart, and
// a record's write is bounded by 5 s, which the default minute covers.
type lostTicks map[string]map[time.Time]int // schedule → tick → audits in a row that found it

// tell counts the ticks of found and calls f for each found a second
// time in a row; when found is complete (an audit that failed for some
// schedules says nothing of theirs), it forgets the ticks found no longer
// has: a tick leaves the window for good, or its record came. A node that
// starts auditing a schedule (another left, or joined) tells its lost
// ticks again: once per auditor, a few times in a cluster's life, rather
// than never.
func (l *lostTicks) tell(found map[string][]time.Time, complete bool, f func(string, time.Time)) {
	if *l == nil {
		*l = lostTicks{}
	}
	for id, ticks := range found {
		seen := (*l)[id]
		if seen == nil {
			seen = map[time.Time]int{}
			(*l)[id] = seen
		}
		for _, t := range ticks {
			t = t.UTC() // one key per instant, whatever zone the backend answered in
			if seen[t]++; seen[t] == 2 && f != nil {
				f(id, t)
			}
		}
	}
	if !complete {
		return
	}
	for id, seen := range *l {
		now := map[time.Time]bool{}
		for _, t := range found[id] {
			now[t.UTC()] = true
		}
		for t := range seen {
			if !now[t] {
				delete(seen, t)
			}
		}
		if len(seen) == 0 {
			delete(*l, id)
		}
	}
}
