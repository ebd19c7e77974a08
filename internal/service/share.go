package service

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/jobs"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// sharer hands out one job value per distinct job, and one string per
// distinct cron expression, while Schedules builds a set: a fleet is
// mostly schedules running the same few commands, and at 100,000 schedules
// a job and its argv each (about 180 bytes) were a sixth of a node's heap.
// Sharing is safe because a built job is never changed again: Run reads
// its fields only, and a reload builds new values (the scheduler sees the
// job changed and keeps the new one, as before).
type sharer struct {
	jobs  map[string]scheduler.Job
	exprs map[string]string
	key   []byte
}

func newSharer() *sharer {
	return &sharer{jobs: map[string]scheduler.Job{}, exprs: map[string]string{}}
}

// expr returns the first string equal to e this sharer saw.
func (sh *sharer) expr(e string) string {
	if s, ok := sh.exprs[e]; ok {
		return s
	}
	sh.exprs[e] = e
	return e
}

// job returns a job equal to j that an earlier schedule got, or j. Only
// the job types this package builds are shared, and only when every
// field is part of the key (a job with an HTTP client or a limit set is
// kept as it is).
func (sh *sharer) job(j scheduler.Job) scheduler.Job {
	k, ok := sh.keyOf(j)
	if !ok {
		return j
	}
	if shared, ok := sh.jobs[string(k)]; ok {
		return shared
	}
	sh.jobs[string(k)] = j
	return j
}

// keyOf encodes every field of j that makes it the job it is, quoted so
// that no two different jobs encode alike. The Logger and Mask of a
// command are the same for every job of a set (Schedules sets them) and
// are compared by the caller's construction, not here.
func (sh *sharer) keyOf(j scheduler.Job) ([]byte, bool) {
	b := sh.key[:0]
	defer func() { sh.key = b }()
	strs := func(vs []string) {
		b = strconv.AppendInt(b, int64(len(vs)), 10)
		for _, v := range vs {
			b = strconv.AppendQuote(b, v)
		}
	}
	kv := func(m map[string]string) {
		b = strconv.AppendInt(b, int64(len(m)), 10)
		if len(m) == 0 {
			return // sorting no keys still allocated: a tenth of Schedules at 100,000
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			b = strconv.AppendQuote(b, k)
			b = strconv.AppendQuote(b, m[k])
		}
	}
	dur := func(d time.Duration) { b = strconv.AppendInt(append(b, ' '), int64(d), 10) }
	switch j := j.(type) {
	case *jobs.Command:
		if j.MaxLineBytes != 0 || j.MaxOutputBytes != 0 {
			return nil, false
		}
		b = append(b, 'c')
		strs(j.Argv)
		b = strconv.AppendQuote(b, j.Dir)
		kv(j.Env)
		b = strconv.AppendBool(b, j.BaseEnv.Clean)
		strs(j.BaseEnv.Allow)
		strs(j.BaseEnv.Mask)
		dur(j.KillGrace)
	case *jobs.HTTP:
		if j.Client != nil {
			return nil, false
		}
		b = append(b, 'h')
		b = strconv.AppendQuote(b, j.URL)
		b = strconv.AppendQuote(b, j.Method)
		kv(j.Headers)
		b = strconv.AppendQuote(b, j.Body)
		dur(j.Timeout)
		b = strconv.AppendInt(b, int64(len(j.SuccessCodes)), 10)
		for _, c := range j.SuccessCodes {
			b = strconv.AppendInt(append(b, ' '), int64(c), 10)
		}
	default:
		return nil, false
	}
	return b, true
}

// CompactIDs moves the schedules' ids into one string, each id a slice
// of it. The ids are what a node keeps longest (scheduler, metrics, API,
// agent and drift hashes all hold them), and loading them left each one a
// small string among the parse's garbage: once that garbage is collected,
// the ids keep most of its pages resident. Done once at start: the
// metrics keep the first string of an id for good, so compacting at every
// reload would keep each reload's whole string alive.
func CompactIDs(schedules []scheduler.Schedule) {
	n := 0
	for i := range schedules {
		n += len(schedules[i].ID)
	}
	var b strings.Builder
	b.Grow(n)
	for i := range schedules {
		b.WriteString(schedules[i].ID)
	}
	all, off := b.String(), 0
	for i := range schedules {
		l := len(schedules[i].ID)
		schedules[i].ID = all[off : off+l]
		off += l
	}
}
