package ops

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The fire times a schedule's hash covers: hashSamples months from the
// start of the current UTC year, hashTicks ticks after each month's start.
// A node whose time-zone data differ (a country changed its daylight-saving
// rules) fires at other instants somewhere in those two years. The anchor
// moves once a year, so nodes agree except for the seconds around New
// Year's midnight UTC, until each has announced again.
const (
	hashSamples = 24
	hashTicks   = 2
)

// hashLen is how many hex digits of SHA-256 a hash keeps: enough to never
// collide by chance between two definitions, short enough for a table.
const hashLen = 16

// ScheduleHashes returns, per schedule id, a hash of its effective
// definition: cron, zone, hint, overlap, timing, retries, the job (its
// program and arguments, or its method and URL host), and its next fire
// times as this node computes them. Values that may be secrets (command
// environment values, HTTP header values and bodies, URL paths and
// credentials) are left out: the hash is shown to operators and stored in
// the backend, and a secret rotated on one node before another is not a
// schedule that differs.
func ScheduleHashes(schedules []scheduler.Schedule, now time.Time) map[string]string {
	hashes, _ := Hashes(schedules, now)
	return hashes
}

// FieldHashes are, per schedule, the hashes of the parts of its
// definition drift names (cluster.DriftFields: cron, zone, hint, timing,
// job, and the sampled fire times): what a node announces for the
// schedules it sees in drift, so that status names the field that
// differs. They cover what ScheduleHashes covers, the same values,
// secrets left out alike. A node keeps them for all its schedules and
// announces a few, so they are kept as 32 bytes a schedule, sorted by id,
// not as a map of strings (twice that).
type FieldHashes struct {
	byID []fieldHash // sorted by id; of two with one id, the last
}

type fieldHash struct {
	id  string
	sum [len(cluster.DriftFields) * cluster.FieldHashLen / 2]byte
}

// Of returns schedule id's field hashes as a cluster.Node.Fields value
// (cluster.FieldHashLen hex digits per field, concatenated).
func (f *FieldHashes) Of(id string) (string, bool) {
	if f == nil {
		return "", false
	}
	i, ok := slices.BinarySearchFunc(f.byID, id, func(h fieldHash, id string) int { return strings.Compare(h.id, id) })
	if !ok {
		return "", false
	}
	for i+1 < len(f.byID) && f.byID[i+1].id == id {
		i++
	}
	return hex.EncodeToString(f.byID[i].sum[:]), true
}

// ComputeFieldHashes returns the schedules' FieldHashes (see FieldHashes).
func ComputeFieldHashes(schedules []scheduler.Schedule, now time.Time) *FieldHashes {
	_, fh := Hashes(schedules, now)
	return fh
}

// hashChunk is how many schedules a hashing worker takes at least: below
// it a second goroutine costs more than it saves.
const hashChunk = 4096

// Hashes returns ScheduleHashes and ComputeFieldHashes in one pass: both
// encode the same fields and sample the same fire times, and at 100,000
// schedules computing them apart was a third of a node's start. The
// schedules are split between up to GOMAXPROCS workers, each with its
// own caches, as the hashes of one schedule never depend on another's.
func Hashes(schedules []scheduler.Schedule, now time.Time) (map[string]string, *FieldHashes) {
	y := now.UTC().Year()
	anchor := time.Date(y, time.January, 1, 0, 0, 0, 0, time.UTC)
	n := len(schedules)
	// Only the hex digits kept are encoded (a full encoding cut to
	// hashLen kept its 64 bytes alive), all of them into one string:
	// 16-byte strings apart, among the hashing's garbage, kept most of
	// its pages resident.
	digits := make([]byte, n*hashLen)
	fields := make([]fieldHash, n)
	workers := min(runtime.GOMAXPROCS(0), (n+hashChunk-1)/hashChunk)
	if workers <= 1 {
		hashRange(schedules, anchor, digits, fields)
	} else {
		var wg sync.WaitGroup
		per := (n + workers - 1) / workers
		for lo := 0; lo < n; lo += per {
			hi := min(lo+per, n)
			wg.Go(func() { hashRange(schedules[lo:hi], anchor, digits[lo*hashLen:hi*hashLen], fields[lo:hi]) })
		}
		wg.Wait()
	}
	all := string(digits)
	out := make(map[string]string, n)
	for i := range schedules {
		out[schedules[i].ID] = all[i*hashLen : (i+1)*hashLen]
	}
	slices.SortStableFunc(fields, func(a, b fieldHash) int { return strings.Compare(a.id, b.id) })
	return out, &FieldHashes{byID: fields}
}

// hashRange computes the hashes of schedules into digits (hashLen hex
// digits each) and fhs, in order.
func hashRange(schedules []scheduler.Schedule, anchor time.Time, digits []byte, fhs []fieldHash) {
	ticks := tickSamples{anchor: anchor, seen: map[cronspec.Spec]*sampled{}}
	jobCache := map[scheduler.Job][]byte{}
	// The job's field hash, by its fingerprint's first byte: schedules
	// with equal jobs share one fingerprint (jobFields), so its FNV is
	// taken once, as the sampled ticks' is (sampled.fnv).
	jobFNV := map[*byte]uint16{}
	h := sha256.New()
	var sum [sha256.Size]byte
	var f fields
	for i := range schedules {
		s := &schedules[i]
		fh := &fhs[i]
		fh.id = s.ID
		k := 0
		part := func(v uint16) {
			fh.sum[k], fh.sum[k+1] = byte(v>>8), byte(v)
			k += 2
		}
		// The whole hash's fields are the field hashes' concatenated:
		// each is hashed by FNV at its end, from mark on.
		f.b = f.b[:0]
		mark := 0
		cut := func() {
			part(fnv16(f.b[mark:]))
			mark = len(f.b)
		}
		f.add("id", s.ID)
		mark = len(f.b)
		f.add("cron", s.CronExpr)
		addCalendar(&f, *s)
		cut()
		f.add("zone", zoneName(*s))
		cut()
		f.add("hint", hintName(s.Hint))
		if len(s.Nodes) > 0 {
			// Where it runs, with the hint; only when set, so that the hash
			// of an untargeted schedule stays what earlier versions compute.
			f.add("nodes", strings.Join(s.Nodes, ","))
		}
		cut()
		overlap := s.Overlap
		if overlap == "" {
			overlap = scheduler.OverlapSkip
		}
		f.add("overlap", string(overlap))
		f.add("expected_runtime", s.ExpectedRuntime)
		f.add("jitter", s.Jitter)
		f.add("timeout", s.Timeout)
		f.add("catchup", s.CatchupWindow)
		f.add("spread", s.Spread)
		f.add("retries", int64(s.Retries))
		f.add("retry_backoff", s.RetryBackoff)
		f.add("pause_after_failures", int64(s.PauseAfterFailures))
		if s.Group != "" {
			// Only when set: an ungrouped schedule hashes as before.
			f.add("group", fmt.Sprintf("%s/%d/%v", s.Group, s.GroupMax, s.GroupWait))
		}
		cut()
		h.Reset()
		_, _ = h.Write(f.b) // a hash.Hash never fails
		jb, shared := jobFields(s.Job, jobCache)
		_, _ = h.Write(jb)
		switch {
		case !shared || len(jb) == 0:
			part(fnv16(jb))
		default:
			v, ok := jobFNV[&jb[0]]
			if !ok {
				v = fnv16(jb)
				jobFNV[&jb[0]] = v
			}
			part(v)
		}
		if spec := effectiveSpec(*s); spec != nil {
			t := ticks.of(spec)
			_, _ = h.Write(t.b)
			part(t.fnv)
		} else {
			part(fnv16(nil))
		}
		hex.Encode(digits[i*hashLen:(i+1)*hashLen], h.Sum(sum[:0])[:hashLen/2])
	}
}

// fnv16 is 16 bits of the 32-bit FNV-1a of b: a field hash (hash/fnv's
// allocations were most of the cost at 100,000 schedules). Not a secret's
// guard: the fields hashed hold none.
func fnv16(b []byte) uint16 {
	v := uint32(2166136261)
	for _, c := range b {
		v = (v ^ uint32(c)) * 16777619
	}
	return uint16(v)
}

// addCalendar adds the schedule's calendar (except, start, end) to its
// cron field, only when it has one: the hash of every schedule without
// one stays what nodes of earlier versions compute. The sampled ticks
// alone would miss most of them (an except date is rarely among them).
func addCalendar(f *fields, s scheduler.Schedule) {
	if c := cronspec.CalendarText(s.Spec); c != "" {
		f.add("calendar", c)
	}
}

// fields encodes a schedule's fields for its hash as `name=value\x00`,
// with value printed as fmt's %v prints it: the hash is compared across
// nodes, including nodes of other versions during a rolling deploy, so
// its bytes never change. (fmt.Fprintf per field was most of the CPU of
// starting 100,000 schedules.)
type fields struct{ b []byte }

func (f *fields) add(name string, v any) {
	f.b = append(f.b, name...)
	f.b = append(f.b, '=')
	switch v := v.(type) {
	case string:
		f.b = append(f.b, v...)
	case int64:
		f.b = strconv.AppendInt(f.b, v, 10)
	case time.Duration:
		f.b = append(f.b, v.String()...)
	default:
		f.b = fmt.Appendf(f.b, "%v", v)
	}
	f.b = append(f.b, 0)
}

// Fingerprinter is a job that says what its schedule's hash takes of it
// (jobs.Command and jobs.HTTP do): what it runs, no secret. A job that
// does not (a Go function) is hashed by its type, all it shows.
type Fingerprinter interface {
	Fingerprint() []byte
}

// jobFields is what a job adds to its schedule's hash. Schedules with
// equal jobs share one job value (service.Schedules): a comparable job's
// fingerprint is taken once, in cache.
// shared is true when b is the cache's, the same slice for every equal
// job.
func jobFields(j scheduler.Job, cache map[scheduler.Job][]byte) (b []byte, shared bool) {
	fp, ok := j.(Fingerprinter)
	if !ok {
		if j == nil {
			return []byte("job=\"none\"\x00"), false
		}
		// A Go function: its type is all it shows.
		return fmt.Appendf(nil, "%s=%q\x00", "job", fmt.Sprintf("%T", j)), false
	}
	if !reflect.TypeOf(j).Comparable() {
		return fp.Fingerprint(), false
	}
	b, ok = cache[j]
	if !ok {
		b = fp.Fingerprint()
		cache[j] = b
	}
	return b, true
}

// ConfigHash is one hash over a node's schedule hashes (ScheduleHashes):
// equal on two nodes exactly when they run the same schedules the same way.
func ConfigHash(hashes map[string]string) string {
	h := sha256.New()
	ids := make([]string, 0, len(hashes))
	for id := range hashes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// The bytes fmt's "%s=%s\x00" wrote, appended (fmt was a tenth of the
	// start of 100,000 schedules), a few KiB at a time.
	var b []byte
	for _, id := range ids {
		b = append(b, id...)
		b = append(b, '=')
		b = append(b, hashes[id]...)
		b = append(b, 0)
		if len(b) >= 4096 {
			_, _ = h.Write(b)
			b = b[:0]
		}
	}
	_, _ = h.Write(b)
	return hex.EncodeToString(h.Sum(nil))[:hashLen]
}

// tickSamples computes the sampled fire times of a spec once per spec:
// cronspec.Parse shares one Spec between the schedules with the same expression
// and zone, and the samples cost 48 Next calls (5 µs each for a yearly
// expression in a zone with daylight saving): 100,000 schedules took 27 s.
type tickSamples struct {
	anchor time.Time
	seen   map[cronspec.Spec]*sampled // comparable specs only
}

// sampled is a spec's sample ticks as the hash's fields ("tick=<Unix
// ns>"), and their field hash: a kilobyte or so of bytes for a FNV taken
// byte by byte, which per schedule was a tenth of a node's start.
type sampled struct {
	b   []byte
	fnv uint16
}

// of returns spec's sample ticks.
func (ts tickSamples) of(spec cronspec.Spec) *sampled {
	cached, ok := ts.lookup(spec)
	if ok {
		return cached
	}
	var f fields
	for m := range hashSamples {
		t := ts.anchor.AddDate(0, m, 0)
		for range hashTicks {
			if t = spec.Next(t); t.IsZero() {
				break
			}
			f.add("tick", t.UnixNano())
		}
	}
	out := &sampled{b: f.b, fnv: fnv16(f.b)}
	ts.store(spec, out)
	return out
}

// lookup and store skip specs that cannot be map keys: a comparable type
// may still hold an incomparable value (a spread offset around an
// embedder's Spec), which panics only when hashed.
func (ts tickSamples) lookup(spec cronspec.Spec) (out *sampled, ok bool) {
	if !reflect.TypeOf(spec).Comparable() {
		return nil, false
	}
	defer func() {
		if recover() != nil {
			out, ok = nil, false
		}
	}()
	out, ok = ts.seen[spec]
	return out, ok
}

func (ts tickSamples) store(spec cronspec.Spec, out *sampled) {
	if !reflect.TypeOf(spec).Comparable() {
		return
	}
	defer func() { _ = recover() }()
	ts.seen[spec] = out
}
