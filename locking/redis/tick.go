package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/locking"
)

var (
	_ locking.TickLocker = (*Locker)(nil)
	_ locking.Pauser     = (*Locker)(nil)
)

// Verdict codes of tick.lua's reply.
const (
	tickGranted   = 1
	tickDone      = 2
	tickContended = 3
	tickPaused    = 4
	tickMissed    = 5
	tickAhead     = 6
	// tickFailed: ticks.lua caught an error of this request's step (a key
	// of another type, a counter that is no integer: data not written by
	// bext). Only this request fails; the batch's others stand.
	tickFailed = 7
	// tickExpired: a resend whose grant's lease ended, told expired with
	// the grant's fence (locking.TickExpired).
	tickExpired = 8
	// tickResent: granted to a resend, from its own lock or its grant's
	// record, with the mark as it is. Verdicts granted, paused and missed
	// decided anew carry the mark before the step in the mark's place
	// instead (locking.TickAnswer.Before; 0: none), their mark being T
	// (markSlot): the reply grows by nothing.
	tickResent = 9
	// tickPausedKept, tickMissedKept: paused or missed, answered from the
	// request's verdict record (tickstep.lua's grant_key), with the mark
	// in place: nothing was raised. These and tickResent, answered from a
	// record, carry the Before the record kept (its first attempt's) where
	// no other verdict carries anything: tick.lua in ahead's place,
	// ticks.lua after all its requests' integers (kept).
	tickPausedKept = 10
	tickMissedKept = 11
)

// tickReplyLen is the length of tick.lua's reply: verdict, fence, mark (or
// before, markSlot), now, ahead.
const tickReplyLen = 5

// initMarksBatch bounds how many marks one InitMarks round trip creates, so
// that each stays short on the server and within OpTimeout.
const initMarksBatch = 500

// TryLockTick is try-lock-tick (locking.TickLocker): tick.lua makes the
// decision of locking.DecideTick in one script on the server's clock, with
// times counted in whole microseconds (T's nanoseconds are dropped). The
// lock is the schedule's (prefix{key}) or, with PerTick, the tick's
// (prefix{key}:tick:<T in µs>); the fence counter, mark and pause flag are
// the schedule's, all in the key's hash slot.
//
// A request carrying the Token and T of an earlier one whose reply was
// lost is answered from the lock that call took while it lives: granted,
// with its fence, its TTL counted from now. Once the lock ended, from the
// grant's record (tickstep.lua's grant_key, kept twice the TTL): taken
// again under its fence, or expired (locking.DecideLapsedResend). The lock's value carries both
// (tickCall.tag): the schedule's lock is one key for every T, and another
// T asked with a granted call's token is decided as any other request.
// A resend (req.Resend) answered contended or done, decided anew, leaves
// 'c' or 'd' under the same record key for as long: a late copy of an
// earlier attempt, or another resend, is answered the same and changes
// nothing. So does any request carrying req.Token answered paused or
// missed ('p', 'm'): its resend after a lost reply is told the same, not
// done. go-redis does not resend a script by itself (url.go,
// noRetries): the caller does, marking it a resend.
func (l *Locker) TryLockTick(ctx context.Context, req locking.TickRequest) (locking.TickAnswer, error) {
	c, err := l.prepareTick(req)
	if err != nil {
		return locking.TickAnswer{}, err
	}
	if err := l.checkOpen(); err != nil {
		return locking.TickAnswer{}, err
	}
	if err := ctx.Err(); err != nil {
		return locking.TickAnswer{}, fmt.Errorf("locking/redis: try-lock-tick %q: %w", req.Key, context.Cause(ctx))
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	keys, args := l.tickArgs(&c)
	return l.answerTick(ctx, &c, tickScript.Run(opCtx, l.client, keys, args...))
}

// tickCall is one try-lock-tick made ready to send: the request and its
// token. Its keys and arguments are built where they are sent (tickArgs
// for tick.lua, tickScriptBatch for ticks.lua), its lock's state only
// when it is granted.
type tickCall struct {
	req   locking.TickRequest
	token string
	// tag is what the lock's value starts with: token '@' T in µs
	// (tickTag). The scripts find a resend's lock by it, so a resend is
	// recognised by its token and T together.
	tag string
}

// tickSep separates a try-lock-tick's token from its T in a lock's value.
// T is digits, so the last tickSep of a tag starts it.
const tickSep = "@"

// tickTag is the tag of a try-lock-tick of token for tick (see tickCall).
func tickTag(token string, tick time.Time) string {
	var b [20]byte
	return token + tickSep + string(strconv.AppendInt(b[:0], tick.UnixMicro(), 10))
}

// prepareTick validates req and draws its token.
func (l *Locker) prepareTick(req locking.TickRequest) (tickCall, error) {
	if err := locking.CheckTickRequest(req); err != nil {
		return tickCall{}, err
	}
	token := req.Token
	if token == "" {
		var err error
		if token, err = locking.NewToken(); err != nil {
			return tickCall{}, err
		}
	} else if err := checkToken(req.Key, token); err != nil {
		return tickCall{}, err
	}
	return tickCall{req: req, token: token, tag: tickTag(token, req.Tick)}, nil
}

// tickLockKey is the key of c's lock: the schedule's (prefix{key}) or,
// with PerTick, the tick's (prefix{key}:tick:<T in µs>), as ticks.lua
// builds it too.
func (l *Locker) tickLockKey(c *tickCall) string {
	if c.req.PerTick {
		return l.lockKey(c.req.Key) + tickSuffix + strconv.FormatInt(c.req.Tick.UnixMicro(), 10)
	}
	return l.lockKey(c.req.Key)
}

// tickFloor is c's floor as tick.lua and ticks.lua take it: ” for none.
func tickFloor(req *locking.TickRequest) string {
	if req.Floor.IsZero() {
		return ""
	}
	return strconv.FormatInt(req.Floor.UnixMicro(), 10)
}

// tickArgs returns tick.lua's keys and arguments for c.
func (l *Locker) tickArgs(c *tickCall) (keys []string, args []any) {
	req := &c.req
	base := l.lockKey(req.Key)
	return []string{l.tickLockKey(c), base + fenceSuffix, base + markSuffix, base + pauseSuffix},
		[]any{c.tag, l.holderBox, l.ttlArg(req.TTL),
			strconv.FormatInt(req.Tick.UnixMicro(), 10), tickFloor(req),
			strconv.FormatInt(req.MaxSkew.Microseconds(), 10),
			strconv.FormatInt(req.Window.Microseconds(), 10),
			l.tickChannel(), req.Key, resendArg(req)}
}

// resendArg is tick.lua's flags argument: 'r' for a resend
// (locking.TickRequest.Resend), whose verdict contended or done the script
// then records for a late copy of an earlier attempt; 't' for a request
// carrying its caller's Token, whose verdict paused or missed it records
// for a resend after a lost reply.
func resendArg(req *locking.TickRequest) string {
	switch {
	case req.Resend && req.Token != "":
		return "rt"
	case req.Resend:
		return "r"
	case req.Token != "":
		return "t"
	}
	return ""
}

// answerTick decodes tick.lua's reply to c into the answer, registering a
// granted lock. ctx is the caller's, for the error's cause.
func (l *Locker) answerTick(ctx context.Context, c *tickCall, cmd *goredis.Cmd) (locking.TickAnswer, error) {
	r, err := replyInts(cmd, tickReplyLen)
	if err != nil {
		return locking.TickAnswer{}, l.opError(ctx, "try-lock-tick", c.req.Key, err)
	}
	v, mark, before := markSlot(c, r[0], r[2], r[4])
	return l.decodeTick(ctx, c, v, r[1], mark, r[3], r[4], before)
}

// markSlot reads the mark's place of a reply of verdict v to c: the mark
// before the step with the verdicts that raise the mark, decided anew, whose
// mark is T; the mark itself otherwise, and tickResent is tickGranted.
// kept is the Before a record kept, read for the verdicts answered from a
// record (tickResent, tickPausedKept, tickMissedKept; kept).
func markSlot(c *tickCall, v, slot, kept int64) (verdict, mark, before int64) {
	switch v {
	case tickGranted, tickPaused, tickMissed:
		return v, c.req.Tick.UnixMicro(), slot
	case tickResent:
		return tickGranted, slot, kept
	case tickPausedKept:
		return tickPaused, slot, kept
	case tickMissedKept:
		return tickMissed, slot, kept
	}
	return v, slot, 0
}

// kept reports whether a reply's verdict v was answered from a record,
// and carries the Before the record kept.
func kept(v int64) bool {
	return v == tickResent || v == tickPausedKept || v == tickMissedKept
}

// decodeTick turns tick_step's verdict, fence, mark, ahead and before for
// c, and the server's time now, into the answer, registering a granted
// lock.
func (l *Locker) decodeTick(ctx context.Context, c *tickCall, verdict, fence, mark, now, ahead, before int64) (locking.TickAnswer, error) {
	req := c.req
	ans := locking.TickAnswer{Now: time.UnixMicro(now)}
	if mark != 0 {
		ans.Mark = time.UnixMicro(mark)
	}
	if before != 0 {
		ans.Before = time.UnixMicro(before)
	}
	switch verdict {
	case tickGranted:
		if fence <= 0 {
			return locking.TickAnswer{}, fmt.Errorf("locking/redis: try-lock-tick %q: %w: granted with fence %d", req.Key, errReply, fence)
		}
		handleKey := req.Key
		if req.PerTick {
			handleKey = locking.TickLockKey(req.Key, req.Tick)
		}
		h, err := l.track(ctx, handleKey, newHeld(l.tickLockKey(c)), c.token, c.tag, fence, req.TTL)
		if err != nil {
			return locking.TickAnswer{}, err
		}
		ans.Verdict, ans.Handle = locking.TickGranted, h
	case tickDone:
		ans.Verdict = locking.TickDone
	case tickContended:
		ans.Verdict = locking.TickContended
	case tickPaused:
		ans.Verdict = locking.TickPaused
	case tickMissed:
		ans.Verdict = locking.TickMissed
	case tickAhead:
		// The answer keeps Now: the caller may measure its offset from it.
		return ans, fmt.Errorf("locking/redis: try-lock-tick: %w", &locking.AheadError{
			Key:     req.Key,
			Tick:    req.Tick,
			Offset:  time.Duration(ahead) * time.Microsecond,
			MaxSkew: req.MaxSkew,
		})
	case tickExpired:
		ans.Verdict, ans.Fence = locking.TickExpired, fence
	case tickFailed:
		return locking.TickAnswer{}, fmt.Errorf("locking/redis: try-lock-tick %q: %w: the server's script failed on this schedule's keys (a key of another type, or a value bext did not write?)", req.Key, errReply)
	default:
		return locking.TickAnswer{}, fmt.Errorf("locking/redis: try-lock-tick %q: %w: verdict %d", req.Key, errReply, verdict)
	}
	return ans, nil
}

// checkToken refuses a caller's token the stored value could not carry
// unambiguously (see lib.lua).
func checkToken(key, token string) error {
	if strings.ContainsAny(token, fenceSep+holderSep) || locking.CheckKey(token) != nil {
		return fmt.Errorf("%w: token for key %q must be printable, without %q or %q", locking.ErrInvalid, key, fenceSep, holderSep)
	}
	return nil
}

// InitMarks creates the tick mark of every key that has none at the
// server's time (SET NX in a script reading TIME), pipelined in batches;
// existing marks are left alone.
func (l *Locker) InitMarks(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := locking.CheckKey(k); err != nil {
			return err
		}
	}
	if err := l.checkOpen(); err != nil {
		return err
	}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), initMarksBatch)]
		keys = keys[len(batch):]
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("locking/redis: init marks: %w", context.Cause(ctx))
		}
		opCtx, cancel := l.opContext(ctx)
		cmds, err := l.client.Pipelined(opCtx, func(p goredis.Pipeliner) error {
			for _, k := range batch {
				// EVAL, not EVALSHA: a pipeline cannot fall back on
				// NOSCRIPT, and this runs once per load.
				initMarkScript.Eval(opCtx, p, []string{l.lockKey(k) + markSuffix})
			}
			return nil
		})
		cancel()
		if err == nil {
			for _, c := range cmds {
				if _, err = replyInt(c.(*goredis.Cmd)); err != nil {
					break
				}
			}
		}
		if err != nil {
			return l.opError(ctx, "init marks", "", err)
		}
	}
	return nil
}

// SetPause sets or clears key's pause flag, the hash prefix{key}:pause
// (fields note and, when set, until in µs), which tick.lua reads. Clearing
// deletes it. The write is acknowledged by the one server every
// try-lock-tick of key runs on, so it wins over every later one.
func (l *Locker) SetPause(ctx context.Context, key string, p locking.Pause) error {
	if err := locking.CheckKey(key); err != nil {
		return err
	}
	if err := l.checkOpen(); err != nil {
		return err
	}
	pk := l.lockKey(key) + pauseSuffix
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	var err error
	if !p.Paused {
		err = l.client.Del(opCtx, pk).Err()
	} else {
		fields := []any{"note", p.Note}
		if !p.Until.IsZero() {
			fields = append(fields, "until", strconv.FormatInt(p.Until.UnixMicro(), 10))
		}
		// One transaction: no try-lock-tick sees the old until with the
		// new pause.
		_, err = l.client.TxPipelined(opCtx, func(tx goredis.Pipeliner) error {
			tx.Del(opCtx, pk)
			tx.HSet(opCtx, pk, fields...)
			return nil
		})
	}
	if err != nil {
		return l.opError(ctx, "set pause", key, err)
	}
	return nil
}

// GetPause reads key's pause flag as stored (an expired Until included;
// Pause.Active tells).
func (l *Locker) GetPause(ctx context.Context, key string) (locking.Pause, error) {
	if err := locking.CheckKey(key); err != nil {
		return locking.Pause{}, err
	}
	if err := l.checkOpen(); err != nil {
		return locking.Pause{}, err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	m, err := l.client.HGetAll(opCtx, l.lockKey(key)+pauseSuffix).Result()
	if err != nil {
		return locking.Pause{}, l.opError(ctx, "get pause", key, err)
	}
	if len(m) == 0 {
		return locking.Pause{}, nil
	}
	p := locking.Pause{Paused: true, Note: m["note"]}
	if u, ok := m["until"]; ok {
		us, err := strconv.ParseInt(u, 10, 64)
		if err != nil {
			return locking.Pause{}, fmt.Errorf("locking/redis: get pause %q: %w: until %q", key, errReply, u)
		}
		p.Until = time.UnixMicro(us)
	}
	return p, nil
}

// replyInts decodes a script's reply strictly as an array of n integers.
func replyInts(cmd *goredis.Cmd, n int) ([]int64, error) {
	return replyIntsOf(cmd, n, false)
}

// replyIntsFrom decodes a script's reply strictly as an array of at least
// n integers.
func replyIntsFrom(cmd *goredis.Cmd, n int) ([]int64, error) {
	return replyIntsOf(cmd, n, true)
}

func replyIntsOf(cmd *goredis.Cmd, n int, more bool) ([]int64, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	a, ok := v.([]any)
	if !ok || len(a) < n || (!more && len(a) != n) {
		return nil, fmt.Errorf("%w: %T %v, want %d integers", errReply, v, v, n)
	}
	out := make([]int64, len(a))
	for i, x := range a {
		if out[i], ok = x.(int64); !ok {
			return nil, fmt.Errorf("%w: element %d is %T %v, want an integer", errReply, i, x, x)
		}
	}
	return out, nil
}

// tickBatch bounds how many requests one round trip of TryLockTicks
// carries: large enough to pay for the round trip many times over, small
// enough that Redis runs them within OpTimeout and other clients are not
// kept waiting long behind them (ticks.lua runs them in about 2 ms).
const tickBatch = 500

// TryLockTicks is TryLockTick for many requests at once: a burst of ticks
// due in the same second costs a few round trips instead of one per tick.
// On one server (standalone or Sentinel) each round trip is one ticks.lua
// script deciding up to tickBatch requests in order, at one reading of the
// server's clock; on a Cluster, whose schedules lie in different slots, it
// is a pipeline of tick.lua scripts (go-redis splits it by master).
// answers[i] and errs[i] are what TryLockTick would have returned for
// reqs[i]: each request is decided on its own by the same step
// (tickstep.lua), so the batch changes nothing of the decision. An error
// of the round trip is the error of each request in it. A round trip
// whose reply was lost is resent by go-redis with the same tokens, and
// each request is answered from the lock it took, as for TryLockTick.
func (l *Locker) TryLockTicks(ctx context.Context, reqs []locking.TickRequest) (answers []locking.TickAnswer, errs []error) {
	answers, errs = make([]locking.TickAnswer, len(reqs)), make([]error, len(reqs))
	calls := make([]tickCall, len(reqs))
	for i, r := range reqs {
		calls[i], errs[i] = l.prepareTick(r)
	}
	fail := func(err error) {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	if err := l.checkOpen(); err != nil {
		fail(err)
		return answers, errs
	}
	pending := make([]int, 0, len(reqs))
	for i := range reqs {
		if errs[i] == nil {
			pending = append(pending, i)
		}
	}
	_, cluster := l.client.(*goredis.ClusterClient)
	for len(pending) > 0 {
		batch := pending[:min(len(pending), tickBatch)]
		pending = pending[len(batch):]
		if err := ctx.Err(); err != nil {
			// Only the requests not yet sent: the earlier batches were
			// decided, and a granted tick reported as an error would be
			// skipped with its mark raised, run nowhere.
			err = fmt.Errorf("locking/redis: try-lock-tick: %w", context.Cause(ctx))
			for _, i := range append(batch, pending...) {
				errs[i] = err
			}
			return answers, errs
		}
		// A lone request too goes through ticks.lua: the one path the
		// scheduler's batches take, whatever their size.
		if cluster {
			l.tickPipeline(ctx, calls, batch, answers, errs)
		} else {
			l.tickScriptBatch(ctx, calls, batch, answers, errs)
		}
	}
	return answers, errs
}

// tickScriptBatch decides the requests calls[i], i in batch, in one
// ticks.lua script. What the requests share is sent once (ticks.lua):
// consecutive requests with the same TTL, T, floor, max skew, window and
// kind of lock form one run, and each request adds only its key and token.
func (l *Locker) tickScriptBatch(ctx context.Context, calls []tickCall, batch []int, answers []locking.TickAnswer, errs []error) {
	args := make([]any, 3, 3+8+2*len(batch))
	args[0], args[1], args[2] = l.holderBox, l.tickChannel(), l.prefix
	var run *locking.TickRequest // the current run's first request
	count := 0                   // index in args of the current run's n
	for _, i := range batch {
		c := &calls[i]
		if run == nil || !sameTickRun(run, &c.req) {
			if run != nil {
				args[count] = strconv.Itoa((len(args) - count - 7) / 2)
			}
			run, count = &c.req, len(args)
			per := ""
			if c.req.PerTick {
				per = "1"
			}
			if c.req.Resend {
				per += "r"
			}
			if c.req.Token != "" {
				per += "t"
			}
			args = append(args, nil, l.ttlArg(c.req.TTL),
				strconv.FormatInt(c.req.Tick.UnixMicro(), 10), tickFloor(&c.req),
				strconv.FormatInt(c.req.MaxSkew.Microseconds(), 10),
				strconv.FormatInt(c.req.Window.Microseconds(), 10), per)
		}
		args = append(args, c.req.Key, c.tag)
	}
	args[count] = strconv.Itoa((len(args) - count - 7) / 2)
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	n := 1 + ticksReplyLen*len(batch)
	r, err := replyIntsFrom(ticksScript.Run(opCtx, l.client, nil, args...), n)
	if err == nil {
		// One more integer for each request answered from a record.
		want := n
		for j := range batch {
			if kept(r[1+j*ticksReplyLen]) {
				want++
			}
		}
		if len(r) != want {
			err = fmt.Errorf("%w: %d integers, want %d", errReply, len(r), want)
		}
	}
	x := n // the next kept Before
	for j, i := range batch {
		if err != nil {
			errs[i] = l.opError(ctx, "try-lock-tick", calls[i].req.Key, err)
			continue
		}
		v := r[1+j*ticksReplyLen : 1+(j+1)*ticksReplyLen]
		fence, ahead := v[1], int64(0)
		if v[0] == tickAhead {
			fence, ahead = 0, v[1]
		}
		var kb int64
		if kept(v[0]) {
			kb, x = r[x], x+1
		}
		verdict, mark, before := markSlot(&calls[i], v[0], v[2], kb)
		answers[i], errs[i] = l.decodeTick(ctx, &calls[i], verdict, fence, mark, r[0], ahead, before)
	}
}

// ticksReplyLen is the length of each request's part of ticks.lua's
// reply: verdict, fence (or ahead), mark (or before, markSlot).
const ticksReplyLen = 3

// sameTickRun reports whether a and b share ticks.lua's run arguments:
// compared as they are sent (TTL in ms, times in µs).
func sameTickRun(a, b *locking.TickRequest) bool {
	return a.TTL.Milliseconds() == b.TTL.Milliseconds() &&
		a.Tick.UnixMicro() == b.Tick.UnixMicro() &&
		a.Floor.IsZero() == b.Floor.IsZero() &&
		(a.Floor.IsZero() || a.Floor.UnixMicro() == b.Floor.UnixMicro()) &&
		a.MaxSkew.Microseconds() == b.MaxSkew.Microseconds() &&
		a.Window.Microseconds() == b.Window.Microseconds() &&
		a.PerTick == b.PerTick && a.Resend == b.Resend &&
		(a.Token == "") == (b.Token == "")
}

// tickPipeline decides the requests calls[i], i in batch, in one
// pipeline of tick.lua scripts.
func (l *Locker) tickPipeline(ctx context.Context, calls []tickCall, batch []int, answers []locking.TickAnswer, errs []error) {
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	cmds := make([]*goredis.Cmd, len(batch))
	// The pipeline's own error is that of its first failed command;
	// each command keeps its own, read below.
	_, _ = l.client.Pipelined(opCtx, func(p goredis.Pipeliner) error {
		for j, i := range batch {
			keys, args := l.tickArgs(&calls[i])
			cmds[j] = p.EvalSha(opCtx, tickScript.Hash(), keys, args...)
		}
		return nil
	})
	for j, i := range batch {
		if err := cmds[j].Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			// The script cache was flushed (a restart): the script did
			// not run, so running it again is its first run. Run falls
			// back to EVAL, which loads it for the next ones.
			keys, args := l.tickArgs(&calls[i])
			cmds[j] = tickScript.Run(opCtx, l.client, keys, args...)
		}
		answers[i], errs[i] = l.answerTick(ctx, &calls[i], cmds[j])
	}
}
