package pg

import (
	"context"
	"net/url"
	"testing"
	"time"

	store "github.com/bext-dev/bext-scheduler/cluster"
)

// A give-back whose statement fails (here: it waits on a row lock past
// the session's lock_timeout, a plain SQL error that leaves the session
// up) still gives the lock back: a caller that stops resending would
// otherwise leave it held for as long as the session lives. The trigger
// stays in bext_taken, so it is not lost: a resend puts it back.
func TestGiveBackFailedStillUnlocks(t *testing.T) {
	c := newCluster(t)
	u, err := url.Parse(c.url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("lock_timeout", "200")
	u.RawQuery = q.Encode()
	a := c.open(Options{Holder: "a", URL: u.String()})
	b := c.open(Options{Holder: "b"})
	ctx := context.Background()

	if err := a.Enqueue(ctx, []store.Request{trigger("t1", "s")}); err != nil {
		t.Fatal(err)
	}
	tk, err := a.TakeRequest(ctx, store.TakeReq{Schedule: "s", Node: "node-a", TTL: time.Minute, Token: "tok-a"})
	if err != nil || tk.Handle == nil || tk.Request == nil || tk.Request.ID != "t1" {
		t.Fatalf("TakeRequest = %+v, %v; want t1", tk, err)
	}

	tx, err := c.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM bext_taken WHERE namespace = $1 FOR UPDATE`, c.ns); err != nil {
		t.Fatal(err)
	}
	if err := a.GiveBack(ctx, tk.Handle); err == nil {
		t.Fatal("GiveBack with its row locked by another = nil, want an error")
	} else {
		t.Logf("GiveBack with its row locked: %v", err)
	}
	if held, err := b.Held(ctx, "s"); err != nil || held {
		t.Errorf("Held after a failed give-back = %v, %v; want the lock given back", held, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// The resend puts the trigger back, once.
	for i := range 2 {
		if err := a.GiveBack(ctx, tk.Handle); err != nil {
			t.Fatalf("GiveBack resent (%d) = %v", i, err)
		}
		if got, err := b.Requests(ctx, "s"); err != nil || len(got) != 1 || got[0].ID != "t1" {
			t.Errorf("queue after the give-back resent (%d) = %+v, %v; want t1", i, got, err)
		}
	}
	if held, err := b.Held(ctx, "s"); err != nil || held {
		t.Errorf("Held after the resent give-back = %v, %v", held, err)
	}
}
