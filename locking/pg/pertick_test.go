package pg

import (
	"context"
	"errors"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// grantEntry is one entry of a row's tick_grants: a per-tick grant's
// fence and token, by its tick.
type grantEntry struct {
	fence int64
	token string
}

// tickGrants reads key's tick_grants (nil when the column is NULL).
func (c *cluster) tickGrants(key string) map[int64]grantEntry {
	c.t.Helper()
	var null bool
	if err := c.admin.QueryRow(context.Background(), `SELECT tick_grants IS NULL FROM bext_lock_fences WHERE namespace = $1 AND key = $2`,
		c.ns, key).Scan(&null); err != nil {
		c.t.Fatal(err)
	}
	if null {
		return nil
	}
	rows, err := c.admin.Query(context.Background(), `SELECT g.k::bigint, (g.v ->> 0)::bigint, g.v ->> 1
FROM bext_lock_fences, jsonb_each(tick_grants) AS g(k, v) WHERE namespace = $1 AND key = $2`, c.ns, key)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	got := map[int64]grantEntry{}
	for rows.Next() {
		var tick int64
		var e grantEntry
		if err := rows.Scan(&tick, &e.fence, &e.token); err != nil {
			c.t.Fatal(err)
		}
		got[tick] = e
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return got
}

// TestPerTickGrantsKeptWhileResendable: the schedule's row keeps one entry
// (tick → fence, token) per per-tick grant that a resend may still come
// for, so each is recognised whatever was granted after it. An entry goes
// with its grant's release; a per-tick grant drops those older than keep
// plus max(skew, window), which no resend comes for any more. A schedule
// lock's grant has its entry too, gone with its release. A resend of a
// per-tick grant whose first session still holds the lock is an error,
// never done.
func TestPerTickGrantsKeptWhileResendable(t *testing.T) {
	c := newCluster(t)
	a, b := c.open(Options{}), c.open(Options{})
	ctx := context.Background()

	pr := tickReq("plain", c.dbNow())
	plain := mustTick(t, a, pr, locking.TickGranted, "a schedule lock")
	if g, want := c.tickGrants("plain"), (grantEntry{plain.Handle.Fence(), plain.Handle.Token()}); len(g) != 1 || g[pr.Tick.UnixMicro()] != want {
		t.Errorf("a schedule lock's grant wrote tick_grants %v, want its own entry %v at T", g, want)
	}
	if err := a.Release(ctx, plain.Handle); err != nil {
		t.Fatal(err)
	}
	if g := c.tickGrants("plain"); g != nil {
		t.Errorf("after its release, a schedule lock's tick_grants are %v, want NULL", g)
	}

	now := c.dbNow().Truncate(time.Millisecond)
	reqs := make([]locking.TickRequest, 4)
	for i := range reqs {
		reqs[i] = tickReq("k", now.Add(time.Duration(i)*time.Second))
		reqs[i].PerTick, reqs[i].Token = true, "token-of-T"+strconv.Itoa(i+1)
	}
	handles := make([]*locking.Handle, len(reqs))
	want := map[int64]grantEntry{}
	grant := func(i int) {
		t.Helper()
		handles[i] = mustTick(t, a, reqs[i], locking.TickGranted, "T"+strconv.Itoa(i+1)).Handle
		want[reqs[i].Tick.UnixMicro()] = grantEntry{handles[i].Fence(), reqs[i].Token}
	}
	check := func(what string) {
		t.Helper()
		if got := c.tickGrants("k"); !maps.Equal(got, want) {
			t.Fatalf("%s: tick_grants %v, want %v", what, got, want)
		}
	}
	for i := range 3 {
		grant(i)
	}
	check("after T1, T2 and T3")

	// A resend of T1 from another node while a's session holds T1: the
	// row recognises it, and says the lock is still held.
	if ans, err := b.TryLockTick(ctx, reqs[0]); !errors.Is(err, locking.ErrResendHeld) || !errors.Is(err, locking.ErrUnavailable) {
		t.Fatalf("T1 resent while its first session holds it = %v, %v; want ErrResendHeld, which wraps ErrUnavailable (not definite: resend)", ans.Verdict, err)
	}

	// Entries no resend comes for any more: one older than keep plus the
	// window, dropped at the next grant, and one just within, kept.
	keep := max(time.Minute, a.MaxLease()) + max(testSkew, testWindow)
	stale, near := now.Add(-keep-time.Minute).UnixMicro(), now.Add(-keep+30*time.Second).UnixMicro()
	c.exec(`UPDATE bext_lock_fences SET tick_grants = tick_grants
  || jsonb_build_object($3::bigint::text, jsonb_build_array(1, 'stale'), $4::bigint::text, jsonb_build_array(2, 'near'))
WHERE namespace = $1 AND key = $2`, c.ns, "k", stale, near)
	want[near] = grantEntry{2, "near"}

	if err := a.Release(ctx, handles[1]); err != nil {
		t.Fatal(err)
	}
	delete(want, reqs[1].Tick.UnixMicro())
	want[stale] = grantEntry{1, "stale"}
	check("after T2's release")
	delete(want, stale)
	grant(3)
	check("after T4's grant")
	staleReq := tickReq("k", time.UnixMicro(stale))
	staleReq.PerTick, staleReq.Token = true, "stale"
	mustTick(t, b, staleReq, locking.TickDone, "a resend of the dropped entry")

	// The last release leaves the column NULL.
	c.exec(`UPDATE bext_lock_fences SET tick_grants = tick_grants - $3::bigint::text WHERE namespace = $1 AND key = $2`, c.ns, "k", near)
	delete(want, near)
	for _, i := range []int{0, 2, 3} {
		if err := a.Release(ctx, handles[i]); err != nil {
			t.Fatal(err)
		}
		delete(want, reqs[i].Tick.UnixMicro())
		check("after T" + strconv.Itoa(i+1) + "'s release")
	}
	if g := c.tickGrants("k"); g != nil {
		t.Errorf("tick_grants %v after every grant was released, want NULL", g)
	}
	for i := range reqs {
		mustTick(t, b, reqs[i], locking.TickDone, "T"+strconv.Itoa(i+1)+" resent after its release")
	}
}

// TestTableGainsTickGrants: a bext_lock_fences made before tick_grants
// came, or before token_tick came (every other column there), is brought
// up to date in place by the first Locker that uses it, and per-tick
// grants are then recorded: their entries in tick_grants, the latest
// grant's T in token_tick.
func TestTableGainsTickGrants(t *testing.T) {
	const (
		tickGrants = "ALTER TABLE bext_lock_fences ADD COLUMN IF NOT EXISTS tick_grants jsonb;\n"
		tokenTick  = "ALTER TABLE bext_lock_fences ADD COLUMN IF NOT EXISTS token_tick bigint;\n"
	)
	for _, tc := range []struct {
		name    string
		missing []string
	}{
		{"before tick_grants", []string{tickGrants, tokenTick}},
		{"before token_tick", []string{tokenTick}},
	} {
		t.Run(tc.name, func(t *testing.T) { tableGains(t, tc.missing) })
	}
}

// tableGains makes a bext_lock_fences without the columns that missing
// adds, and checks the first Locker that uses it adds them.
func tableGains(t *testing.T, missing []string) {
	c := newCluster(t)
	ctx := context.Background()
	schema := c.ns + "_old"
	c.exec(`CREATE SCHEMA ` + schema)
	t.Cleanup(func() { c.exec(`DROP SCHEMA ` + schema + ` CASCADE`) })
	old := createTableSQL
	for _, add := range missing {
		without := strings.Replace(old, add, "", 1)
		if without == old {
			t.Fatalf("createTableSQL no longer has %q as this test expects: update the test", add)
		}
		old = without
	}
	c.exec(`SET search_path = ` + schema + `; ` + old + ` RESET search_path`)
	columns := func() (n int64) {
		t.Helper()
		if err := c.admin.QueryRow(ctx, `SELECT count(*) FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attname IN ('tick_grants', 'token_tick') AND NOT attisdropped`, schema+".bext_lock_fences").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n, want := columns(), 2-int64(len(missing)); n != want {
		t.Fatalf("the old table has %d of tick_grants and token_tick, want %d", n, want)
	}
	u, err := url.Parse(c.url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	l := c.open(Options{URL: u.String()})
	now := c.dbNow().Truncate(time.Millisecond)
	for i := range 2 {
		r := tickReq("k", now.Add(time.Duration(i)*time.Second))
		r.PerTick = true
		ans := mustTick(t, l, r, locking.TickGranted, "T"+strconv.Itoa(i+1))
		defer func() {
			if err := l.Release(ctx, ans.Handle); err != nil {
				t.Error(err)
			}
		}()
	}
	if n := columns(); n != 2 {
		t.Fatalf("tick_grants and token_tick columns after the first Locker used the old table: %d, want 2", n)
	}
	var entries, tokenTick int64
	if err := c.admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM jsonb_object_keys(tick_grants)), token_tick
FROM `+schema+`.bext_lock_fences WHERE namespace = $1 AND key = 'k'`, c.ns).Scan(&entries, &tokenTick); err != nil {
		t.Fatal(err)
	}
	if entries != 2 {
		t.Errorf("tick_grants entries in the upgraded table: %d, want 2 (T1 and T2)", entries)
	}
	if want := now.Add(time.Second).UnixMicro(); tokenTick != want {
		t.Errorf("token_tick in the upgraded table: %d, want T2 (%d)", tokenTick, want)
	}
}

// TestResendTokenReusedForAnotherTick: a schedule lock's resend is
// recognised by its token and its T together, never by the token alone:
// a caller that (against the contract) asks another tick with a granted
// call's token is decided as any other request. A is granted T1 with a
// token; T2 is decided paused (the mark is T2 now) and A's session ends.
// T2 asked with T1's token is done: the row's token and mark matched it,
// as the rule before token_tick read them, but the token was granted for
// T1. T1 resent with its token is granted with its fence.
func TestResendTokenReusedForAnotherTick(t *testing.T) {
	c := newCluster(t)
	a, b := c.open(Options{}), c.open(Options{})
	ctx := context.Background()
	now := c.dbNow().Truncate(time.Millisecond)
	r1, r2 := tickReq("k", now), tickReq("k", now.Add(time.Second))
	r1.Token, r2.Token = "token-of-T1", "token-of-T2"
	h1 := mustTick(t, a, r1, locking.TickGranted, "T1").Handle
	if err := b.SetPause(ctx, "k", locking.Pause{Paused: true}); err != nil {
		t.Fatal(err)
	}
	mustTick(t, b, r2, locking.TickPaused, "T2 while paused")
	c.kill("k")
	reused := r2
	reused.Token = r1.Token
	mustTick(t, b, reused, locking.TickDone, "T2 asked with T1's token")
	re := mustTick(t, b, r1, locking.TickGranted, "T1 resent with its token").Handle
	if re.Fence() != h1.Fence() {
		t.Errorf("resent T1's fence = %d, want the first call's %d", re.Fence(), h1.Fence())
	}
	if err := b.Release(ctx, re); err != nil {
		t.Fatal(err)
	}
	mustTick(t, b, r1, locking.TickDone, "T1 resent after its release")
}

// TestPerTickGrantKeptForItsOwnLease: a per-tick grant's entry in
// tick_grants lasts as long as its own request said a resend may come
// (its TTL, or MaxLease), whatever the request that prunes the row asks.
// A is granted T1, 50s late within a wide MaxSkew and with a TTL of an
// hour, and its reply is lost; B, whose request for T2 has a TTL of a
// second and a narrow skew and window (another node's configuration, or
// the same schedule after a reload), is granted T2 a moment later. T1's
// resend, well within T1's TTL, must be granted with T1's fence: answered
// done, T1 is granted and run nowhere.
func TestPerTickGrantKeptForItsOwnLease(t *testing.T) {
	c := newCluster(t)
	a, b, cc := c.open(Options{}), c.open(Options{}), c.open(Options{})
	now := c.dbNow().Truncate(time.Millisecond)
	r1 := tickReq("k", now.Add(-50*time.Second))
	r1.PerTick, r1.Token, r1.TTL, r1.MaxSkew, r1.Window = true, "token-of-T1", time.Hour, 2*time.Minute, 0
	h1 := mustTick(t, a, r1, locking.TickGranted, "T1, 50s late within MaxSkew 2m, TTL 1h").Handle
	c.kill(locking.TickLockKey(r1.Key, r1.Tick))

	r2 := tickReq("k", now)
	r2.PerTick, r2.Token, r2.TTL, r2.MaxSkew, r2.Window = true, "token-of-T2", time.Second, time.Second, 0
	h2 := mustTick(t, b, r2, locking.TickGranted, "T2 on time, TTL 1s, skew 1s, no window").Handle
	defer b.Release(context.Background(), h2)

	re := mustTick(t, cc, r1, locking.TickGranted, "T1 resent with its token, within its TTL, after T2's grant").Handle
	if re.Fence() != h1.Fence() {
		t.Errorf("resent T1's fence = %d, want the first call's %d", re.Fence(), h1.Fence())
	}
	if err := cc.Release(context.Background(), re); err != nil {
		t.Fatal(err)
	}
}
