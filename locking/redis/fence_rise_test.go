package redis

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// TestFencesRiseAcrossScriptsAndKinds: one key's fences, drawn by plain
// locks (acquire.lua, counter with an expiry), batched per-tick grants
// (ticks.lua, counter written by its MSET), single per-tick grants
// (tick.lua) and a counter set far above the clock (a rewound clock), in
// turn and back to back, rise strictly in the order they were drawn; and
// the counter always holds the last fence.
func TestFencesRiseAcrossScriptsAndKinds(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	l := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin)})
	ctx := context.Background()
	counter := l.lockKey("k") + fenceSuffix
	var last int64
	check := func(what string, f int64) {
		t.Helper()
		if f <= last {
			t.Fatalf("%s: fence %d, not above the last one %d", what, f, last)
		}
		last = f
		if c, ok := getInt(t, admin, counter); !ok || c != last {
			t.Fatalf("%s: counter %d (present %v), want the last fence %d", what, c, ok, last)
		}
	}
	tick := time.Now().Add(-testSkew / 2)
	next := func() time.Time { tick = tick.Add(time.Millisecond); return tick }
	for round := range 20 {
		if round == 10 {
			// A counter far above the clock: every path must INCR it.
			if err := admin.Set(ctx, counter, strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10), 0).Err(); err != nil {
				t.Fatal(err)
			}
			last = 0
		}
		h, err := l.TryLock(ctx, "k", time.Minute)
		if err != nil || h == nil {
			t.Fatalf("round %d: TryLock: %v, %v", round, h, err)
		}
		check(fmt.Sprintf("round %d, plain lock", round), h.Fence())
		if err := l.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		var reqs []locking.TickRequest
		for range 5 {
			r := tickReq("k", next())
			r.PerTick = true
			reqs = append(reqs, r)
		}
		answers, errs := l.TryLockTicks(ctx, reqs)
		for i := range reqs {
			if errs[i] != nil || answers[i].Verdict != locking.TickGranted {
				t.Fatalf("round %d, request %d: %v, %v", round, i, answers[i].Verdict, errs[i])
			}
			f := answers[i].Handle.Fence()
			if f <= last {
				t.Fatalf("round %d, batched request %d: fence %d, not above %d", round, i, f, last)
			}
			last = f
		}
		if c, ok := getInt(t, admin, counter); !ok || c != last {
			t.Fatalf("round %d, end of batch: counter %d (present %v), want the last fence %d", round, c, ok, last)
		}
		r := tickReq("k", next())
		r.PerTick = true
		ans, err := l.TryLockTick(ctx, r)
		if err != nil || ans.Verdict != locking.TickGranted {
			t.Fatalf("round %d, single tick: %v, %v", round, ans.Verdict, err)
		}
		check(fmt.Sprintf("round %d, single tick", round), ans.Handle.Fence())
		for _, a := range append(answers, ans) {
			if err := l.Release(ctx, a.Handle); err != nil {
				t.Fatal(err)
			}
		}
	}
}
