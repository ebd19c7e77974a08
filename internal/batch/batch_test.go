package batch

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

// gatedBatcher answers each request with its own tick as the mark (so a
// test sees every tick got its own answer), after gate lets it, and
// records the batches.
type gatedBatcher struct {
	gate  chan struct{}
	fail  error // when set, every request's error
	short bool  // answer one request fewer than asked

	mu      sync.Mutex
	batches [][]locking.TickRequest
	asked   int // requests in batches so far
}

func (g *gatedBatcher) TryLockTicks(ctx context.Context, reqs []locking.TickRequest) ([]locking.TickAnswer, []error) {
	g.mu.Lock()
	g.batches = append(g.batches, reqs)
	g.asked += len(reqs)
	g.mu.Unlock()
	<-g.gate
	n := len(reqs)
	if g.short {
		n--
	}
	answers, errs := make([]locking.TickAnswer, n), make([]error, n)
	for i := range n {
		answers[i] = locking.TickAnswer{Verdict: locking.TickDone, Mark: reqs[i].Tick}
		errs[i] = g.fail
	}
	return answers, errs
}

// tickBatcher batches try-lock-ticks, as the scheduler's does.
type tickBatcher = Batcher[locking.TickRequest, locking.TickAnswer, struct{}]

type tickCall = Call[locking.TickRequest, locking.TickAnswer, struct{}]

// errShort answers a request the backend left unanswered.
var errShort = fmt.Errorf("test: the lock backend left a batched try-lock-tick unanswered: %w", locking.ErrUnavailable)

// askAll sends n requests (ticks 1s..ns) through b at once and returns
// each answer and error by request.
func askAll(b *tickBatcher, n int) ([]locking.TickAnswer, []error, func()) {
	answers, errs := make([]locking.TickAnswer, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = b.Do(context.Background(), locking.TickRequest{Key: fmt.Sprint(i), Tick: time.Unix(int64(i+1), 0)})
		}()
	}
	return answers, errs, wg.Wait
}

// waitQueued spins until every one of n requests is in a batch or in the
// queue (nothing signals that: the requests come from goroutines just
// started).
func waitQueued(t *testing.T, b *tickBatcher, g *gatedBatcher, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		g.mu.Lock()
		asked := g.asked
		g.mu.Unlock()
		if q+asked == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d queued and %d asked of %d requests", q, asked, n)
		}
		runtime.Gosched()
	}
}

// TestBatcherGroupsWaitingRequests: while MaxSenders batches are on their
// way, the other requests wait, and the next batch takes all of them; each
// request gets its own answer.
func TestBatcherGroupsWaitingRequests(t *testing.T) {
	const n = 200
	g := &gatedBatcher{gate: make(chan struct{})}
	b := &tickBatcher{Send: g.TryLockTicks, Short: errShort}
	answers, errs, wait := askAll(b, n)
	waitQueued(t, b, g, n)
	close(g.gate)
	wait()
	for i := range n {
		if errs[i] != nil || !answers[i].Mark.Equal(time.Unix(int64(i+1), 0)) {
			t.Fatalf("request %d answered %v, %v: not its own answer", i, answers[i].Mark, errs[i])
		}
	}
	if len(g.batches) != MaxSenders+1 {
		t.Errorf("%d batches for %d requests, %d of them sent before the others queued; want %d", len(g.batches), n, MaxSenders, MaxSenders+1)
	}
	if b.senders != 0 || len(b.queue) != 0 {
		t.Errorf("after the burst: %d senders, %d queued; want none", b.senders, len(b.queue))
	}
}

// TestBatcherErrorIsEachRequests: an error of the round trip, or a
// request left unanswered, is that request's error: its tick is skipped
// as backend_error, never run.
func TestBatcherErrorIsEachRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    *gatedBatcher
	}{
		{"failed", &gatedBatcher{gate: make(chan struct{}), fail: fmt.Errorf("test: %w", locking.ErrUnavailable)}},
		{"short", &gatedBatcher{gate: make(chan struct{}), short: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 50
			b := &tickBatcher{Send: tc.g.TryLockTicks, Short: errShort}
			_, errs, wait := askAll(b, n)
			waitQueued(t, b, tc.g, n)
			close(tc.g.gate)
			wait()
			failed := 0
			for _, err := range errs {
				if err != nil {
					if !errors.Is(err, locking.ErrUnavailable) {
						t.Fatalf("error %v; want it to wrap ErrUnavailable", err)
					}
					failed++
				}
			}
			want := n // every request of every failed batch
			if tc.g.short {
				want = len(tc.g.batches) // the last request of each batch
			}
			if failed != want {
				t.Errorf("%d requests failed, want %d", failed, want)
			}
		})
	}
}

// A batch can carry requests of different bursts, each bounded by its own
// context. The round trip must not end at the earliest of them: a request
// ended mid-trip (its deadline passed, or cancelled) gets its context's
// error, as it would have alone, and the others get their answers. Ended
// at the earliest, every request of the batch failed, and the ticks the
// backend had granted (their marks raised) ran nowhere.
func TestBatchOutlivesOneRequestsEnd(t *testing.T) {
	entered, gate := make(chan struct{}), make(chan struct{})
	b := &tickBatcher{Short: errShort, Send: func(ctx context.Context, reqs []locking.TickRequest) ([]locking.TickAnswer, []error) {
		close(entered)
		answers, errs := make([]locking.TickAnswer, len(reqs)), make([]error, len(reqs))
		select {
		case <-gate:
			for i, r := range reqs {
				answers[i] = locking.TickAnswer{Verdict: locking.TickGranted, Mark: r.Tick}
			}
		case <-ctx.Done(): // as a real backend's round trip ends
			for i := range errs {
				errs[i] = ctx.Err()
			}
		}
		return answers, errs
	}}
	now := time.Now()
	ctx1, cancel1 := context.WithDeadline(context.Background(), now.Add(time.Hour))
	ctx2, cancel2 := context.WithDeadline(context.Background(), now.Add(2*time.Hour))
	defer cancel2()
	c1 := &tickCall{Ctx: ctx1, Req: locking.TickRequest{Key: "a", Tick: time.Unix(1, 0)}, Wake: make(chan struct{})}
	c2 := &tickCall{Ctx: ctx2, Req: locking.TickRequest{Key: "b", Tick: time.Unix(2, 0)}, Wake: make(chan struct{})}
	b.mu.Lock()
	b.queue, b.senders = []*tickCall{c1, c2}, 1
	b.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b.sendOne() {
		}
	}()
	<-entered
	cancel1() // the earlier-bounded request ends mid-trip
	close(gate)
	<-c1.Wake
	<-c2.Wake
	<-done
	if !errors.Is(c1.Err, context.Canceled) {
		t.Errorf("the ended request: err %v, want its context's error", c1.Err)
	}
	if c2.Err != nil || c2.Ans.Verdict != locking.TickGranted || !c2.Ans.Mark.Equal(c2.Req.Tick) {
		t.Errorf("the request still bounded: answer %+v, err %v; want granted", c2.Ans, c2.Err)
	}
}

// A request whose own context ended while it waited in the queue is not
// sent: it is answered at once with its context's error, for its caller
// to resend or give up on. Sent, the backend could grant it (the mark
// raised) though its caller could no longer use the grant.
func TestBatchSendsNoEndedRequest(t *testing.T) {
	var sent []locking.TickRequest
	b := &tickBatcher{Short: errShort, Send: func(ctx context.Context, reqs []locking.TickRequest) ([]locking.TickAnswer, []error) {
		sent = append(sent, reqs...)
		answers := make([]locking.TickAnswer, len(reqs))
		for i, r := range reqs {
			answers[i] = locking.TickAnswer{Verdict: locking.TickGranted, Mark: r.Tick}
		}
		return answers, make([]error, len(reqs))
	}}
	ended, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	call := func(ctx context.Context, key string) *tickCall {
		return &tickCall{Ctx: ctx, Req: locking.TickRequest{Key: key, Tick: time.Unix(1, 0)}, Wake: make(chan struct{})}
	}
	for _, tc := range []struct {
		name  string
		calls []*tickCall
	}{
		{"with a live one", []*tickCall{call(ended, "ended1"), call(context.Background(), "live"), call(ended, "ended2")}},
		{"alone", []*tickCall{call(ended, "ended3")}},
	} {
		sent = nil
		b.mu.Lock()
		b.queue, b.senders = append([]*tickCall(nil), tc.calls...), 1
		b.mu.Unlock()
		for b.sendOne() {
		}
		for _, r := range sent {
			if r.Key != "live" {
				t.Errorf("%s: request %q sent after its context ended", tc.name, r.Key)
			}
		}
		for _, c := range tc.calls {
			<-c.Wake
			if c.Req.Key == "live" {
				if c.Err != nil || c.Ans.Verdict != locking.TickGranted {
					t.Errorf("%s: the live request: answer %+v, err %v; want granted", tc.name, c.Ans, c.Err)
				}
				continue
			}
			if !errors.Is(c.Err, context.DeadlineExceeded) || c.Ans.Verdict != 0 {
				t.Errorf("%s: request %q: answer %+v, err %v; want its context's error, unanswered", tc.name, c.Req.Key, c.Ans, c.Err)
			}
		}
	}
}
