package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
	"github.com/bext-dev/bext-scheduler/locking"
)

// flipCtx is a context that reports itself cancelled once flipped.
type flipCtx struct {
	context.Context
	flipped *atomic.Bool
}

func (c flipCtx) Err() error {
	if c.flipped.Load() {
		return context.Canceled
	}
	return nil
}

// flipAfterScript flips ctx after the first script call has been answered.
type flipAfterScript struct{ flipped *atomic.Bool }

func (flipAfterScript) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, n, a string) (net.Conn, error) { return next(ctx, n, a) }
}
func (h flipAfterScript) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.flipped.Store(true)
		}
		return err
	}
}
func (flipAfterScript) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// TestTryLockTicksCancelAfterFirstBatchKeepsItsGrants: TryLockTicks with more than
// tickBatch requests whose context ends after the first round trip was
// answered. The first batch's requests were decided by Redis (marks raised,
// locks taken); their answers must stay what TryLockTick would have said
// (granted, with a handle): an error there would have the caller skip a
// tick whose mark was raised and whose lock is held, lost cluster-wide
// (found by review: the context error once overwrote them).
func TestTryLockTicksCancelAfterFirstBatchKeepsItsGrants(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	l := openLocker(t, Options{URL: url, KeyPrefix: prefix})
	var flipped atomic.Bool
	l.client.(*goredis.Client).AddHook(flipAfterScript{&flipped})

	now := time.Now()
	reqs := make([]locking.TickRequest, tickBatch+1)
	for i := range reqs {
		reqs[i] = locking.TickRequest{Key: fmt.Sprintf("r/%04d", i), Tick: now, TTL: time.Minute, MaxSkew: 5 * time.Second}
	}
	answers, errs := l.TryLockTicks(flipCtx{context.Background(), &flipped}, reqs)

	// Redis decided request 0: its mark is raised to T.
	mark, err := admin.Get(context.Background(), l.lockKey("r/0000")+markSuffix).Result()
	if err != nil {
		t.Fatalf("mark of r/0000: %v", err)
	}
	if mark != fmt.Sprint(now.UnixMicro()) {
		t.Fatalf("mark of r/0000 = %s, want %d", mark, now.UnixMicro())
	}
	held, _ := admin.Exists(context.Background(), l.lockKey("r/0000")).Result()
	t.Logf("request 0: verdict %v handle %v err %v; lock key exists: %d", answers[0].Verdict, answers[0].Handle, errs[0], held)
	if errs[0] != nil {
		t.Errorf("request 0 was granted by Redis (mark raised to T, lock held) but answered with error %v: the tick is lost", errs[0])
	}
}

// TestTicksBatchErrorFailsOnlyItsRequest: one request of a ticks.lua batch
// whose step fails on the server (here a fence counter that is not an
// integer, so INCR refuses it) fails that request alone: request 0, another
// schedule, granted on the server (mark raised to T, lock taken) earlier in
// the same script, is answered granted (found by review: the error once
// aborted the script, a script is not rolled back, and every request was
// answered with the error, so no node ran request 0's tick).
func TestTicksBatchErrorFailsOnlyItsRequest(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	l := openLocker(t, Options{URL: url, KeyPrefix: prefix})
	ctx := context.Background()
	now := time.Now()
	// b's counter is above the clock (so grant takes INCR) and not an integer.
	if err := admin.Set(ctx, l.lockKey("b")+fenceSuffix, "99999999999999999999x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	reqs := []locking.TickRequest{
		{Key: "a", Tick: now, TTL: time.Minute, MaxSkew: 5 * time.Second},
		{Key: "b", Tick: now, TTL: time.Minute, MaxSkew: 5 * time.Second},
	}
	answers, errs := l.TryLockTicks(ctx, reqs)
	mark, _ := admin.Get(ctx, l.lockKey("a")+markSuffix).Result()
	lock, _ := admin.Get(ctx, l.lockKey("a")).Result()
	t.Logf("a: verdict %v err %v; on the server: mark %q lock %q", answers[0].Verdict, errs[0], mark, lock)
	t.Logf("b: verdict %v err %v", answers[1].Verdict, errs[1])
	if errs[0] != nil && mark == fmt.Sprint(now.UnixMicro()) {
		t.Errorf("schedule a's tick was granted on the server (mark %s, lock %q) but answered %v because of schedule b's bad counter: lost", mark, lock, errs[0])
	}
}

// TestTicksFailedStepRaisesNoMark: a request of a ticks.lua batch whose
// step fails on the server after deciding to grant (its fence counter is
// not an integer, so INCR refuses it) raises no mark and publishes
// nothing: it is answered with an error, so a mark raised for it would
// consume a tick that runs nowhere, and its published line would have
// waiting nodes drop it too. Request a, another schedule in the same
// batch, is granted and published: the batch's one message names a alone.
func TestTicksFailedStepRaisesNoMark(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL(t)
	admin := adminClient(t, url)
	prefix := testPrefix(t, admin)
	l := openLocker(t, Options{URL: url, KeyPrefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps := admin.Subscribe(ctx, l.tickChannel())
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	// b's counter is above the clock (so grant takes INCR) and not an integer.
	if err := admin.Set(ctx, l.lockKey("b")+fenceSuffix, "99999999999999999999x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	reqs := []locking.TickRequest{
		{Key: "b", Tick: now, TTL: time.Minute, MaxSkew: 5 * time.Second},
		{Key: "a", Tick: now, TTL: time.Minute, MaxSkew: 5 * time.Second},
	}
	answers, errs := l.TryLockTicks(ctx, reqs)
	if errs[0] == nil {
		t.Fatalf("b, whose step failed on the server, = %v, want an error", answers[0].Verdict)
	}
	if errs[1] != nil || answers[1].Verdict != locking.TickGranted {
		t.Fatalf("a = %v, %v; want granted", answers[1].Verdict, errs[1])
	}
	if mark, err := admin.Get(ctx, l.lockKey("b")+markSuffix).Result(); !errors.Is(err, goredis.Nil) {
		t.Errorf("b's mark after its failed step = %q, %v; want none: the tick was answered with an error, and a raised mark consumes it", mark, err)
	}
	msg, err := ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("the batch's message: %v", err)
	}
	want := fmt.Sprintf("%d a", now.UnixMicro())
	if msg.Payload != want {
		t.Errorf("the batch published %q, want %q: b's failed step must publish nothing", msg.Payload, want)
	}
}
