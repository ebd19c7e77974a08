package ops_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/internal/ops"
	"github.com/bext-dev/bext-scheduler/jobs"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

func hashOf(t *testing.T, s scheduler.Schedule, now time.Time) string {
	t.Helper()
	return ops.ScheduleHashes([]scheduler.Schedule{s}, now)[s.ID]
}

func TestScheduleHashes(t *testing.T) {
	now := utc("2026-03-01T10:00:00Z")
	base := func() scheduler.Schedule {
		return scheduler.Schedule{ID: "report", CronExpr: "0 3 * * *", Location: paris(t), Spec: mustSpec(t, "0 3 * * *", paris(t)),
			Job: &jobs.Command{Argv: []string{"/bin/report"}, Env: map[string]string{"TOKEN": "one"}}}
	}
	h := hashOf(t, base(), now)
	if len(h) != 16 {
		t.Fatalf("hash %q", h)
	}
	// The same definition hashes the same all year, whenever the node
	// computes it: nodes announcing at different moments agree.
	for _, at := range []time.Time{utc("2026-01-01T00:00:00Z"), now.Add(time.Second), utc("2026-12-31T23:59:59Z")} {
		if got := hashOf(t, base(), at); got != h {
			t.Errorf("hash at %v = %s, at %v = %s", at, got, now, h)
		}
	}
	same := base()
	same.Job.(*jobs.Command).Env["TOKEN"] = "rotated" // a secret's value is not hashed
	if hashOf(t, same, now) != h {
		t.Error("an env value changed the hash: secrets must stay out of it")
	}

	for name, change := range map[string]func(*scheduler.Schedule){
		"cron": func(s *scheduler.Schedule) {
			s.CronExpr, s.Spec = "0 4 * * *", mustSpec(t, "0 4 * * *", paris(t))
		},
		"argv": func(s *scheduler.Schedule) { s.Job = &jobs.Command{Argv: []string{"/bin/report", "-v"}} },
		// A date no sampled tick falls on: the calendar itself is hashed.
		"except": func(s *scheduler.Schedule) {
			s.Spec = withCalendar(t, s.Spec, cronspec.Calendar{Except: []string{"2026-12-25"}})
		},
		"end": func(s *scheduler.Schedule) {
			s.Spec = withCalendar(t, s.Spec, cronspec.Calendar{End: utc("2030-01-01T00:00:00Z")})
		},
		"retries": func(s *scheduler.Schedule) { s.Retries = 2 },
		"overlap": func(s *scheduler.Schedule) { s.Overlap = scheduler.OverlapAllow },
		"hint":    func(s *scheduler.Schedule) { s.Hint = "node_local" },
		// Stale time-zone data: the zone has the same name but no daylight
		// saving (as when a node's tzdata predates a rule change). Its
		// summer ticks fall an hour off, and only the fire times tell.
		"tz data": func(s *scheduler.Schedule) {
			stale := time.FixedZone("Europe/Paris", 3600)
			s.Location, s.Spec = stale, mustSpec(t, "0 3 * * *", stale)
		},
	} {
		s := base()
		change(&s)
		if hashOf(t, s, now) == h {
			t.Errorf("changing %s left the hash %s", name, h)
		}
	}
}

func TestConfigHash(t *testing.T) {
	a := map[string]string{"x": "1", "y": "2"}
	b := maps.Clone(a)
	if ops.ConfigHash(a) != ops.ConfigHash(b) {
		t.Error("equal maps hash differently")
	}
	b["y"] = "3"
	if ops.ConfigHash(a) == ops.ConfigHash(b) {
		t.Error("a changed schedule hash left the config hash")
	}
	delete(b, "y")
	if ops.ConfigHash(a) == ops.ConfigHash(b) || ops.ConfigHash(b) == ops.ConfigHash(map[string]string{}) {
		t.Error("a removed schedule left the config hash")
	}
}

// The hash's bytes never change between versions: nodes of two versions
// during a rolling deploy compare them, and a change reads as drift on
// every schedule. These are the hashes of the first version that had them.
func TestScheduleHashesStable(t *testing.T) {
	now := utc("2026-03-01T10:00:00Z")
	catchup := 90 * time.Minute
	for _, c := range []struct {
		s    scheduler.Schedule
		want string
	}{
		{scheduler.Schedule{ID: "report", CronExpr: "0 3 * * *", Location: paris(t), Spec: mustSpec(t, "0 3 * * *", paris(t)),
			Job: &jobs.Command{Argv: []string{"/bin/report", "a b"}, Env: map[string]string{"TOKEN": "one"}}}, "b9661f270bcacbb0"},
		{scheduler.Schedule{ID: "hook", CronExpr: "*/5 * * * *", Spec: mustSpec(t, "*/5 * * * *", time.UTC), Hint: "require_global",
			Overlap: scheduler.OverlapAllow, ExpectedRuntime: 2 * time.Minute, Jitter: 1500 * time.Millisecond, Timeout: time.Hour,
			CatchupWindow: catchup, Spread: time.Second, Retries: 3, RetryBackoff: 10 * time.Second, PauseAfterFailures: 5,
			Job: &jobs.HTTP{URL: "https://user:pw@example.com/secret/path", Method: "POST", Timeout: 30 * time.Second}}, "542418832c29301d"},
		{scheduler.Schedule{ID: "clean", CronExpr: "@every 90s", Spec: mustSpec(t, "@every 90s", time.UTC),
			Job: &jobs.Command{Argv: []string{"sh", "-c", "echo \"hi\"\n"}, Dir: "/srv/x y", Env: map[string]string{"B": "1", "A": "2"},
				BaseEnv: jobs.EnvPolicy{Clean: true, Allow: []string{"PATH", "HOME"}}}}, "ba3580ba9b93c11b"},
		// Header names and success codes, and a Go function (its type):
		// pinned when the jobs began to report their own fingerprint.
		{scheduler.Schedule{ID: "http", CronExpr: "0 * * * *", Job: &jobs.HTTP{URL: "https://u:p@example.com/secret?x=1", Method: "POST",
			Headers: map[string]string{"X-A": "1"}, Timeout: 3 * time.Second, SuccessCodes: []int{200, 204}}}, "d0aaf00c57b80578"},
		{scheduler.Schedule{ID: "fn", CronExpr: "0 0 * * *", Job: scheduler.JobFunc(nil)}, "e60ac5416a266a0c"},
		{scheduler.Schedule{ID: "none", CronExpr: "0 0 * * *"}, "6bca92871382d0e1"},
	} {
		if got := hashOf(t, c.s, now); got != c.want {
			t.Errorf("%s: hash %s, want %s", c.s.ID, got, c.want)
		}
	}
}

// The config hash's bytes never change either: it is the old fmt-written
// "id=hash\x00" per schedule, in id order, whatever the map's size (the
// writes are chunked).
func TestConfigHashStable(t *testing.T) {
	if got := ops.ConfigHash(map[string]string{"b": "2", "a": "1"}); got != "a63ebf0f2669af14" {
		t.Errorf("ConfigHash = %s, want a63ebf0f2669af14", got)
	}
	hashes := map[string]string{}
	for i := range 5000 {
		hashes[fmt.Sprintf("s%06d", i)] = fmt.Sprintf("%016x", i*7919)
	}
	h := sha256.New()
	for _, id := range slices.Sorted(maps.Keys(hashes)) {
		fmt.Fprintf(h, "%s=%s\x00", id, hashes[id])
	}
	if got, want := ops.ConfigHash(hashes), hex.EncodeToString(h.Sum(nil))[:16]; got != want {
		t.Errorf("ConfigHash of 5,000 schedules = %s, want %s", got, want)
	}
}

// Schedules sharing one job (as service.Schedules shares equal jobs) hash
// as they do with a job each: the shared job's fields are encoded once.
func TestScheduleHashesSharedJob(t *testing.T) {
	now := utc("2026-03-01T10:00:00Z")
	mk := func(id string, j *jobs.Command) scheduler.Schedule {
		return scheduler.Schedule{ID: id, CronExpr: "0 3 * * *", Spec: mustSpec(t, "0 3 * * *", time.UTC), Job: j}
	}
	job := func(arg string) *jobs.Command { return &jobs.Command{Argv: []string{"/bin/x", arg}} }
	shared := job("a")
	got := ops.ScheduleHashes([]scheduler.Schedule{mk("one", shared), mk("two", shared), mk("three", job("b"))}, now)
	for id, arg := range map[string]string{"one": "a", "two": "a", "three": "b"} {
		if want := hashOf(t, mk(id, job(arg)), now); got[id] != want {
			t.Errorf("%s: hash %s with a shared job, %s with its own", id, got[id], want)
		}
	}
}

// Each change of a schedule's definition is named by the field it
// changed, as status shows it: two nodes announce the whole hashes and
// the field hashes of the two definitions.
func TestFieldHashesNameTheField(t *testing.T) {
	t.Parallel()
	now := utc("2026-03-01T10:00:00Z")
	base := func() scheduler.Schedule {
		return scheduler.Schedule{ID: "report", CronExpr: "0 3 * * *", Location: paris(t), Spec: mustSpec(t, "0 3 * * *", paris(t)),
			Job: &jobs.Command{Argv: []string{"/bin/report"}, Env: map[string]string{"TOKEN": "one"}}}
	}
	announce := func(node string, s scheduler.Schedule) cluster.Node {
		h := ops.ScheduleHashes([]scheduler.Schedule{s}, now)
		f, ok := ops.ComputeFieldHashes([]scheduler.Schedule{s}, now).Of(s.ID)
		if !ok || len(f) != len(cluster.DriftFields)*cluster.FieldHashLen {
			t.Fatalf("field hashes %q, %v", f, ok)
		}
		return cluster.Node{NodeID: node, ConfigHash: ops.ConfigHash(h), Schedules: h, Fields: map[string]string{s.ID: f}}
	}
	utcZone := func(s *scheduler.Schedule) { s.Location, s.Spec = time.UTC, mustSpec(t, "0 3 * * *", time.UTC) }
	for _, tc := range []struct {
		name   string
		change func(*scheduler.Schedule)
		want   string
	}{
		{"cron", func(s *scheduler.Schedule) { s.CronExpr, s.Spec = "0 4 * * *", mustSpec(t, "0 4 * * *", paris(t)) }, "[cron]"},
		{"zone", utcZone, "[zone]"},
		{"tz data", func(s *scheduler.Schedule) {
			stale := time.FixedZone("Europe/Paris", 3600)
			s.Location, s.Spec = stale, mustSpec(t, "0 3 * * *", stale)
		}, "[zone]"},
		{"hint", func(s *scheduler.Schedule) { s.Hint = "node_local" }, "[hint]"},
		{"nodes", func(s *scheduler.Schedule) { s.Nodes = []string{"role=db"} }, "[hint]"},
		{"retries", func(s *scheduler.Schedule) { s.Retries = 2 }, "[timing]"},
		{"overlap", func(s *scheduler.Schedule) { s.Overlap = scheduler.OverlapAllow }, "[timing]"},
		{"argv", func(s *scheduler.Schedule) { s.Job = &jobs.Command{Argv: []string{"/bin/report", "-v"}} }, "[job]"},
		{"except", func(s *scheduler.Schedule) {
			s.Spec = withCalendar(t, s.Spec, cronspec.Calendar{Except: []string{"*-12-25"}})
		}, "[cron]"},
		{"cron and job", func(s *scheduler.Schedule) {
			s.CronExpr, s.Spec = "0 4 * * *", mustSpec(t, "0 4 * * *", paris(t))
			s.Job = &jobs.Command{Argv: []string{"/bin/other"}}
		}, "[cron job]"},
	} {
		changed := base()
		tc.change(&changed)
		d := cluster.Drift([]cluster.Node{announce("n1", base()), announce("n2", changed)})
		if len(d.Schedules) != 1 || fmt.Sprint(d.Schedules[0].Fields) != tc.want {
			t.Errorf("%s: drift %+v, want fields %s", tc.name, d, tc.want)
		}
	}
	// A secret's value changes neither hash.
	same := base()
	same.Job.(*jobs.Command).Env["TOKEN"] = "rotated"
	a, _ := ops.ComputeFieldHashes([]scheduler.Schedule{same}, now).Of("report")
	b, _ := ops.ComputeFieldHashes([]scheduler.Schedule{base()}, now).Of("report")
	if a != b {
		t.Error("an env value changed the field hashes")
	}
	// Of finds each of many schedules, given in any order, and no other.
	var many []scheduler.Schedule
	for _, id := range []string{"m3", "m1", "m2"} {
		sc := base()
		sc.ID = id
		many = append(many, sc)
	}
	fh := ops.ComputeFieldHashes(many, now)
	for _, id := range []string{"m1", "m2", "m3"} {
		if got, ok := fh.Of(id); !ok || got != b {
			t.Errorf("Of(%s) = %q, %v; want %q", id, got, ok, b)
		}
	}
	if _, ok := fh.Of("m0"); ok {
		t.Error("Of found a schedule that is not there")
	}
}

// The field hashes' bytes never change between versions either: nodes of
// two versions compare them.
func TestFieldHashesStable(t *testing.T) {
	now := utc("2026-03-01T10:00:00Z")
	s := scheduler.Schedule{ID: "report", CronExpr: "0 3 * * *", Location: paris(t), Spec: mustSpec(t, "0 3 * * *", paris(t)),
		Job: &jobs.Command{Argv: []string{"/bin/report", "a b"}}}
	if got, _ := ops.ComputeFieldHashes([]scheduler.Schedule{s}, now).Of("report"); got != "61b5f1704933aaf10923e49d" {
		t.Errorf("field hashes %s, want 61b5f1704933aaf10923e49d", got)
	}
}

// Many schedules are hashed by several workers at once, each with its own
// caches: every schedule's hashes are still those it has alone, whether
// its spec and job are shared with others or its own.
func TestHashesManyAsAlone(t *testing.T) {
	now := utc("2026-03-01T10:00:00Z")
	shared := &jobs.Command{Argv: []string{"/bin/shared"}}
	zone := paris(t)
	var many []scheduler.Schedule
	for i := range 10_000 {
		expr := fmt.Sprintf("%d %d * * *", i%60, i%24)
		s := scheduler.Schedule{ID: fmt.Sprintf("s%05d", 9_999-i), CronExpr: expr, Location: zone, Job: shared}
		switch {
		case i%4 == 1:
			s.Job = &jobs.Command{Argv: []string{"/bin/own", fmt.Sprint(i)}}
		case i%100 == 2: // a spec of its own: the samples are not shared
			s.Spec = mustSpec(t, expr, zone)
			s.Spread = time.Hour
		case i%4 == 3:
			s.Retries = i
		}
		many = append(many, s)
	}
	hashes, fields := ops.Hashes(many, now)
	if len(hashes) != len(many) {
		t.Fatalf("%d hashes for %d schedules", len(hashes), len(many))
	}
	for i := 0; i < len(many); i += 199 { // a sample from every worker's share
		s := many[i]
		alone, aloneFields := ops.Hashes([]scheduler.Schedule{s}, now)
		if hashes[s.ID] != alone[s.ID] {
			t.Errorf("%s: hash %s among many, %s alone", s.ID, hashes[s.ID], alone[s.ID])
		}
		got, _ := fields.Of(s.ID)
		want, _ := aloneFields.Of(s.ID)
		if got != want {
			t.Errorf("%s: field hashes %s among many, %s alone", s.ID, got, want)
		}
	}
}

func withCalendar(t *testing.T, spec cronspec.Spec, cal cronspec.Calendar) cronspec.Spec {
	t.Helper()
	spec, err := cronspec.WithCalendar(spec, cal)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
