package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

const (
	testSkew = 2 * time.Second
	testTTL  = time.Minute
)

// tickReq is a try-lock-tick of key at tick with the tests' defaults.
func tickReq(key string, tick time.Time) locking.TickRequest {
	return locking.TickRequest{Key: key, Tick: tick, TTL: testTTL, MaxSkew: testSkew}
}

func mustTick(t testing.TB, l *Locker, req locking.TickRequest, want locking.TickVerdict) locking.TickAnswer {
	t.Helper()
	a, err := l.TryLockTick(context.Background(), req)
	if err != nil {
		t.Fatalf("TryLockTick(%q, %s) = %v", req.Key, req.Tick.Format(time.RFC3339Nano), err)
	}
	if a.Verdict != want {
		t.Fatalf("TryLockTick(%q, %s) = %v (mark %s), want %v", req.Key, req.Tick.Format(time.RFC3339Nano),
			a.Verdict, a.Mark.Format(time.RFC3339Nano), want)
	}
	if (a.Handle != nil) != (want == locking.TickGranted) {
		t.Fatalf("TryLockTick(%q) = %v with handle %v", req.Key, a.Verdict, a.Handle)
	}
	return a
}

// getInt reads an integer key behind the Locker's back (ok false: missing).
func getInt(t testing.TB, admin *goredis.Client, key string) (n int64, ok bool) {
	t.Helper()
	s, err := admin.Get(context.Background(), key).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, false
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	n, err = strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("GET %s = %q, not a decimal integer", key, s)
	}
	return n, true
}

// TestTickBasics walks one key through granted, done, contended and the
// release that lets the next tick run.
func TestTickBasics(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	a := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "a"})
	b := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "b"})
	ctx := context.Background()

	t0 := time.Now().Truncate(time.Second)
	ans := mustTick(t, a, tickReq("s", t0), locking.TickGranted)
	if !ans.Mark.Equal(t0) {
		t.Errorf("mark after grant = %v, want T %v", ans.Mark, t0)
	}
	if d := time.Since(ans.Now).Abs(); d > time.Minute {
		t.Errorf("answer's Now %v is not the server's clock (off by %v)", ans.Now, d)
	}
	if ans.Handle.Key() != "s" {
		t.Errorf("handle key = %q, want the schedule's key", ans.Handle.Key())
	}
	if f := ans.Handle.Fence(); f < ans.Now.UnixMicro() {
		t.Errorf("fence %d is below the server's clock %d µs", f, ans.Now.UnixMicro())
	}
	// The same tick again, from anyone: done. The next tick while the
	// lock is held: contended.
	mustTick(t, b, tickReq("s", t0), locking.TickDone)
	mustTick(t, a, tickReq("s", t0.Add(-time.Second)), locking.TickDone)
	mustTick(t, b, tickReq("s", t0.Add(time.Second)), locking.TickContended)
	if err := a.Renew(ctx, ans.Handle); err != nil {
		t.Fatalf("Renew of a tick lock: %v", err)
	}
	if err := a.Release(ctx, ans.Handle); err != nil {
		t.Fatalf("Release of a tick lock: %v", err)
	}
	next := mustTick(t, b, tickReq("s", t0.Add(time.Second)), locking.TickGranted)
	if next.Handle.Fence() <= ans.Handle.Fence() {
		t.Errorf("fence of the next holder %d not above %d", next.Handle.Fence(), ans.Handle.Fence())
	}

	// A tick too far ahead is refused with the offset, and changes nothing.
	ahead := t0.Add(time.Minute)
	_, err := a.TryLockTick(ctx, tickReq("s", ahead))
	var ae *locking.AheadError
	if !errors.Is(err, locking.ErrTickAhead) || !errors.As(err, &ae) {
		t.Fatalf("TryLockTick one minute ahead = %v, want an *AheadError", err)
	}
	if ae.Offset < 50*time.Second || ae.Offset > time.Minute+time.Second || ae.MaxSkew != testSkew || ae.Key != "s" {
		t.Errorf("AheadError = %+v, want an offset of about a minute", ae)
	}
	if m, _ := getInt(t, admin, a.lockKey("s")+markSuffix); m != t0.Add(time.Second).UnixMicro() {
		t.Errorf("mark after a refused future tick = %d, want unchanged %d", m, t0.Add(time.Second).UnixMicro())
	}
}

// TestTickPerTick: with PerTick the lock is the tick's, so consecutive
// ticks overlap, each still once; List shows the per-tick locks as
// key@T and never the mark, pause flag or counter.
func TestTickPerTick(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	a := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "a"})
	b := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "b"})
	ctx := context.Background()

	t0 := time.Now().Truncate(time.Second)
	reqFor := func(key string, tick time.Time) locking.TickRequest {
		r := tickReq(key, tick)
		r.PerTick = true
		return r
	}
	req := func(tick time.Time) locking.TickRequest { return reqFor("s", tick) }
	h0 := mustTick(t, a, req(t0), locking.TickGranted).Handle
	h1 := mustTick(t, b, req(t0.Add(time.Second)), locking.TickGranted).Handle
	mustTick(t, b, req(t0), locking.TickDone)
	if h1.Fence() <= h0.Fence() {
		t.Errorf("fences %d then %d: not rising", h0.Fence(), h1.Fence())
	}
	if want := locking.TickLockKey("s", t0); h0.Key() != want {
		t.Errorf("per-tick handle key = %q, want %q", h0.Key(), want)
	}
	if err := a.SetPause(ctx, "s", locking.Pause{Paused: true, Note: "listing"}); err != nil {
		t.Fatal(err)
	}
	plain := mustLock(t, a, "plain", time.Minute)

	infos, err := a.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	got := map[string]locking.LockInfo{}
	for _, li := range infos {
		got[li.Key] = li
	}
	want := map[string]*locking.Handle{
		locking.TickLockKey("s", t0):                  h0,
		locking.TickLockKey("s", t0.Add(time.Second)): h1,
		"plain": plain,
	}
	if len(got) != len(want) {
		t.Errorf("List = %+v, want exactly the locks %v", infos, want)
	}
	for k, h := range want {
		li, ok := got[k]
		if !ok {
			t.Errorf("List misses %q: %+v", k, infos)
			continue
		}
		if li.Fence != h.Fence() {
			t.Errorf("List shows %q with fence %d, want the one it drew, %d", k, li.Fence, h.Fence())
		}
	}
	if got[locking.TickLockKey("s", t0)].Holder != "a" || got[locking.TickLockKey("s", t0.Add(time.Second))].Holder != "b" {
		t.Errorf("holders in List: %+v", infos)
	}
	for _, h := range []*locking.Handle{h0, h1} {
		if err := a.Release(ctx, h); err == nil && h == h1 {
			t.Errorf("Release of b's lock through a = nil, want a refusal")
		}
	}
	if err := b.Release(ctx, h1); err != nil {
		t.Errorf("Release of the per-tick lock: %v", err)
	}

	// Eight nodes race for a tick (of another key: "s" is paused): one is
	// granted, the others told done or contended.
	t2 := t0
	const nodes = 8
	answers := make(chan locking.TickAnswer, nodes)
	errs := make(chan error, nodes)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range nodes {
		n := openLocker(t, Options{URL: url, KeyPrefix: prefix})
		wg.Go(func() {
			<-start
			a, err := n.TryLockTick(ctx, reqFor("race", t2))
			answers <- a
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(answers)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("racing TryLockTick: %v", err)
		}
	}
	granted := 0
	for a := range answers {
		if a.Verdict == locking.TickGranted {
			granted++
		} else if a.Verdict != locking.TickDone && a.Verdict != locking.TickContended {
			t.Errorf("racing TryLockTick = %v", a.Verdict)
		}
	}
	if granted != 1 {
		t.Errorf("%d of %d racing nodes granted tick %v, want exactly 1", granted, nodes, t2)
	}

	// Close gives back the per-tick locks the Locker holds.
	h3 := mustTick(t, a, reqFor("closed", t0), locking.TickGranted).Handle
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	tk := a.lockKey("closed") + tickSuffix + strconv.FormatInt(t0.UnixMicro(), 10)
	if n := admin.Exists(ctx, tk).Val(); n != 0 {
		t.Errorf("per-tick lock %s (%v) still there after Close", tk, h3)
	}
}

// TestTickPause: a pause set before a call wins it, the paused tick is
// consumed (resuming never runs it), and Until ends the pause.
func TestTickPause(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	l := openLocker(t, Options{URL: url, KeyPrefix: testPrefix(t, admin)})
	ctx := context.Background()

	if p, err := l.GetPause(ctx, "s"); err != nil || p != (locking.Pause{}) {
		t.Fatalf("GetPause of an unpaused key = %+v, %v", p, err)
	}
	t0 := time.Now().Truncate(time.Second)
	want := locking.Pause{Paused: true, Note: "maintenance"}
	if err := l.SetPause(ctx, "s", want); err != nil {
		t.Fatal(err)
	}
	if p, err := l.GetPause(ctx, "s"); err != nil || p != want {
		t.Fatalf("GetPause = %+v, %v; want %+v", p, err, want)
	}
	if a := mustTick(t, l, tickReq("s", t0), locking.TickPaused); !a.Mark.Equal(t0) {
		t.Errorf("mark after a paused tick = %v, want it consumed (%v)", a.Mark, t0)
	}
	if err := l.SetPause(ctx, "s", locking.Pause{}); err != nil {
		t.Fatal(err)
	}
	mustTick(t, l, tickReq("s", t0), locking.TickDone) // never replayed
	if p, err := l.GetPause(ctx, "s"); err != nil || p.Paused {
		t.Fatalf("GetPause after resume = %+v, %v", p, err)
	}

	// A pause whose Until has passed pauses nothing.
	until := time.UnixMicro(time.Now().Add(-time.Second).UnixMicro())
	if err := l.SetPause(ctx, "s", locking.Pause{Paused: true, Until: until}); err != nil {
		t.Fatal(err)
	}
	if p, err := l.GetPause(ctx, "s"); err != nil || !p.Until.Equal(until) || !p.Paused {
		t.Fatalf("GetPause = %+v, %v; want until %v", p, err, until)
	}
	mustTick(t, l, tickReq("s", t0.Add(time.Second)), locking.TickGranted)
}

// TestTickMatchesDecideTick runs try-lock-tick over a grid of stored
// states and requests and compares each answer with locking.DecideTick, the
// reference: one by one through tick.lua, then all at once through
// TryLockTicks (ticks.lua, batches of tickBatch that read their keys ahead
// in one MGET and their pause flags in one EXISTS). Offsets stay clear of
// every boundary that depends on the exact instant the server decides, so
// both see the same "now" up to a few milliseconds.
func TestTickMatchesDecideTick(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"OneByOne", "Batch"} {
		t.Run(mode, func(t *testing.T) { testTickGrid(t, mode == "Batch") })
	}
}

// gridCase is one cell of TestTickMatchesDecideTick's grid.
type gridCase struct {
	name string
	req  locking.TickRequest
	base time.Time
	// Offsets from base: the stored mark's, the floor's (gridNone for
	// none) and the tick's.
	mo, fo, to time.Duration
	pk         gridPause
	held       bool
	ans        locking.TickAnswer
	err        error
}

type gridPause int

const (
	gridUnpaused gridPause = iota
	gridPaused
	gridPauseOver
)

const gridNone = time.Duration(1 << 62)

func testTickGrid(t *testing.T, batch bool) {
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	l := openLocker(t, Options{URL: url, KeyPrefix: prefix, Holder: "me", OpTimeout: 10 * time.Second})
	ctx := context.Background()

	s := time.Second
	marks := []time.Duration{gridNone, -100 * s, -10 * s, -s, s}
	floors := []time.Duration{gridNone, -50 * s, -5 * s, -s / 2, 10 * s}
	ticks := []time.Duration{-120 * s, -40 * s, -10 * s, -3 * s, -s, s, 3 * s}
	windows := []time.Duration{0, 30 * s}
	var cases []*gridCase
	for _, mo := range marks {
		for _, fo := range floors {
			for _, to := range ticks {
				for _, w := range windows {
					for _, pk := range []gridPause{gridUnpaused, gridPaused, gridPauseOver} {
						for _, held := range []bool{false, true} {
							c := &gridCase{mo: mo, fo: fo, to: to, pk: pk, held: held}
							c.name = fmt.Sprintf("mark %v floor %v tick %v window %v pause %d held %v", mo, fo, to, w, pk, held)
							if mo == gridNone {
								c.name = fmt.Sprintf("mark none floor %v tick %v window %v pause %d held %v", fo, to, w, pk, held)
							}
							c.req = tickReq(fmt.Sprintf("k%d", len(cases)), time.Time{})
							c.req.Window = w
							cases = append(cases, c)
						}
					}
				}
			}
		}
	}
	// setup stores the cases' states, and their requests' times, around
	// base.
	setup := func(cs []*gridCase, base time.Time) {
		_, err := admin.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, c := range cs {
				c.base = base
				c.req.Tick = base.Add(c.to)
				if c.fo != gridNone {
					c.req.Floor = base.Add(c.fo)
				}
				lk := l.lockKey(c.req.Key)
				if c.mo != gridNone {
					p.Set(ctx, lk+markSuffix, base.Add(c.mo).UnixMicro(), 0)
				}
				switch c.pk {
				case gridPaused:
					p.HSet(ctx, lk+pauseSuffix, "note", "")
				case gridPauseOver:
					p.HSet(ctx, lk+pauseSuffix, "note", "", "until", base.Add(-s).UnixMicro())
				}
				if c.held {
					p.Set(ctx, lk, "someone#1|else", time.Minute)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if batch {
		setup(cases, time.Now().Truncate(time.Millisecond))
		reqs := make([]locking.TickRequest, len(cases))
		for i, c := range cases {
			reqs[i] = c.req
		}
		answers, errs := l.TryLockTicks(ctx, reqs)
		for i, c := range cases {
			c.ans, c.err = answers[i], errs[i]
		}
	} else {
		for _, c := range cases {
			setup([]*gridCase{c}, time.Now().Truncate(time.Millisecond))
			c.ans, c.err = l.TryLockTick(ctx, c.req)
		}
	}

	counts := map[locking.TickVerdict]int{}
	for _, c := range cases {
		req, ans, err, base, mo := c.req, c.ans, c.err, c.base, c.mo
		name := c.name
		lk := l.lockKey(req.Key)
		now := ans.Now
		wantV, wantMark, wantAhead := locking.DecideTick(req, now, base.Add(mo), mo != gridNone, c.pk == gridPaused, c.held)
		if wantAhead > 0 {
			var ae *locking.AheadError
			if !errors.As(err, &ae) || (ae.Offset-wantAhead).Abs() > time.Millisecond {
				t.Errorf("%s: %v, want ahead by %v", name, err, wantAhead)
			}
			counts[0]++
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if wantV == 0 {
			wantV = locking.TickGranted
		}
		counts[wantV]++
		if ans.Verdict != wantV {
			t.Errorf("%s: %v, want %v", name, ans.Verdict, wantV)
			continue
		}
		// The mark is stored when the step raised it; a missing one that
		// was only read stays missing.
		markBase := base.Add(mo)
		if mo == gridNone {
			markBase = now.Add(-req.MaxSkew)
		}
		wantStored := mo != gridNone || wantMark.After(markBase)
		stored, ok := getInt(t, admin, lk+markSuffix)
		if ok != wantStored || (ok && stored != ans.Mark.UnixMicro()) {
			t.Errorf("%s: stored mark %d (present %v, want present %v), answer's %d", name, stored, ok, wantStored, ans.Mark.UnixMicro())
		}
		// Exact unless the mark came from "now".
		if d := ans.Mark.Sub(wantMark).Abs(); d > time.Microsecond {
			t.Errorf("%s: mark %v, want %v", name, ans.Mark, wantMark)
		}
		if want := locking.TickBefore(wantV, base.Add(mo), mo != gridNone); ans.Before.IsZero() != want.IsZero() ||
			ans.Before.UnixMicro() != want.UnixMicro() {
			t.Errorf("%s: %v with Before %v, want %v", name, ans.Verdict, ans.Before, want)
		}
		if wantV == locking.TickGranted {
			if err := l.Release(ctx, ans.Handle); err != nil {
				t.Errorf("%s: Release: %v", name, err)
			}
		}
	}
	// The grid must reach every verdict, or it proves less than it says.
	for _, v := range []locking.TickVerdict{0, locking.TickGranted, locking.TickDone, locking.TickContended, locking.TickPaused, locking.TickMissed} {
		if counts[v] == 0 {
			t.Errorf("no case of the grid ended %v", v)
		}
	}
	t.Logf("%d cases: %v", len(cases), counts)
}
