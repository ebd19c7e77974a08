package redis

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/locking"
)

var _ cluster.Store = (*Locker)(nil)

// Keys of the cluster state. Per schedule, next to its lock (prefix{id}, in
// its hash slot): the history, the skip records (skipsSuffix, skips.go),
// the request queue, the record of the last request taken and one
// accepted record per taken request. For the whole
// cluster, under prefix{} (an empty hash tag: Redis Cluster hashes the
// whole key; no schedule id is empty, so no schedule's keys can be these):
// the live nodes and the index of schedules with requests. None ends with
// '}' or holds "}:tick:" and digits, which is how List skips them.
const (
	runsSuffix      = ":runs"           // sorted set: run JSON scored by StartedAt in µs
	unstartedSuffix = ":runs:unstarted" // hash: run id -> member of a run recorded with Attempts 0 (record.lua)
	requestsSuffix  = ":requests"       // list: request JSON, oldest first
	takenSuffix     = ":taken:"         // + a take's token: the request it took; kept cluster.TakeKeep
	// pendingSuffix (":pending", built in take.lua, renew.lua, release.lua
	// and releases.lua): a hash of the triggers taken and not heard back
	// yet, by token (take.lua says when they go back to the queue).
	acceptedSuffix = ":accepted:" // + request id: the node that took it; expires after a day
	clusterTag     = "{}"
	nodesSuffix    = ":nodes"  // hash: node id -> last seen µs|ttl µs|JSON
	queuedSuffix   = ":queued" // set: schedule ids with requests queued (a hint)
)

// lastRunsBatch bounds how many schedules one LastRuns round trip reads.
const lastRunsBatch = 500

var (
	//go:embed record.lua
	recordSrc string
	//go:embed take.lua
	takeSrc string
	//go:embed enqueue.lua
	enqueueSrc string
	//go:embed done.lua
	doneSrc string
	//go:embed giveback.lua
	giveBackSrc string
	//go:embed announce.lua
	announceSrc string
	//go:embed nodes.lua
	nodesSrc string

	recordScript   = goredis.NewScript(recordSrc)
	takeScript     = goredis.NewScript(libSrc + takeSrc)
	enqueueScript  = goredis.NewScript(enqueueSrc)
	doneScript     = goredis.NewScript(doneSrc)
	giveBackScript = goredis.NewScript(giveBackSrc)
	announceScript = goredis.NewScript(announceSrc)
	nodesScript    = goredis.NewScript(nodesSrc)
)

// Reply codes of take.lua.
const (
	takeEmpty     = 0
	takeTaken     = 1
	takeContended = 2
	takeRequeued  = 3
)

// storedRun is a run as history keeps it: times as µs since the epoch
// (what the fence and mark use; a location would not survive anyway) and
// the duration in ns, exact. It is its own type, not cluster.Run's JSON,
// so the contract's JSON (for people) and the stored form (for this
// package) can change apart. The output tail is not in it: a member is
// this JSON, a newline (which JSON never holds unescaped) and the tail as
// is, so the 4 KiB of output are neither escaped in memory (a newline in
// JSON is 2 bytes, '<' 6) nor scanned by the JSON decoder (5 times the
// time of the round trip for Runs(100), measured).
type storedRun struct {
	Schedule  string `json:"schedule"`
	Tick      int64  `json:"tick"`
	Node      string `json:"node"`
	Result    string `json:"result"`
	StartedAt int64  `json:"started_at"`
	Duration  int64  `json:"duration_ns"`
	Fence     int64  `json:"fence"`
	Manual    bool   `json:"manual"`
	Attempts  int    `json:"attempts"`
	Error     string `json:"error"`
	RunID     string `json:"run_id"`
	// Omitted when empty: the members of scheduled runs without an
	// anomaly (most) stay as they were, and nodes of versions before
	// these fields read and write the same JSON.
	Anomaly string `json:"anomaly,omitempty"`
	By      string `json:"by,omitempty"`
}

// storedNode is an announcement as stored; LastSeen is kept next to it by
// announce.lua, on the server's clock.
type storedNode struct {
	NodeID     string            `json:"node_id"`
	Version    string            `json:"version"`
	StartedAt  int64             `json:"started_at"`
	ConfigHash string            `json:"config_hash"`
	Schedules  map[string]string `json:"schedules"`
	// Added later: nodes of older versions leave them out, and ignore
	// them.
	Ready         bool              `json:"ready,omitempty"`
	ClockOffsetNS *int64            `json:"clock_offset_ns,omitempty"`
	Running       []cluster.Running `json:"running,omitempty"`
	// Fields is absent in what nodes of earlier versions stored.
	Fields map[string]string `json:"fields,omitempty"`
	Tags   []string          `json:"tags,omitempty"` // absent before node tags
}

// RecordRuns adds runs to their schedules' histories: per schedule one
// record.lua (ZADD, then ZREMRANGEBYRANK to keep, atomically), all in one
// pipelined round trip; a Cluster client sends each script to its slot's
// node (a MULTI cannot span slots). A run recorded again (a resend) is
// the same member and is stored once. A run recorded unstarted (Attempts
// 0) is replaced by the real run of its id, never the other way
// (record.lua); a provisional record (Result running), written by every
// run as it starts, looks for its final among the runs of its StartedAt
// only, not the whole history.
func (l *Locker) RecordRuns(ctx context.Context, runs []cluster.Run, keep int) error {
	if err := cluster.CheckKeep(keep); err != nil {
		return err
	}
	for _, r := range runs {
		if err := cluster.CheckRun(r); err != nil {
			return err
		}
	}
	if err := l.begin(ctx, "record runs", ""); err != nil {
		return err
	}
	if len(runs) == 0 {
		return nil
	}
	// Arguments of each schedule's script, in order of first appearance:
	// keep, then score, member, run id and whether started of each run.
	var order []string
	args := make(map[string][]any)
	keepArg := strconv.Itoa(keep)
	for _, r := range runs {
		r = cluster.Bound(r)
		b, err := encodeRun(r)
		if err != nil {
			return fmt.Errorf("locking/redis: record runs: encoding a run of %q: %w", r.Schedule, err)
		}
		a, ok := args[r.Schedule]
		if !ok {
			order = append(order, r.Schedule)
			a = []any{keepArg}
		}
		// µs since the epoch are exact in a double (the score) until 2255.
		started := "0"
		switch {
		case r.Attempts > 0:
			started = "1"
		case r.Result == cluster.ResultRunning:
			// A provisional record: record.lua looks for its final
			// among the runs of its StartedAt only.
			started = "r"
		}
		args[r.Schedule] = append(a, strconv.FormatInt(r.StartedAt.UnixMicro(), 10), b, r.RunID, started)
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	cmds, err := l.client.Pipelined(opCtx, func(p goredis.Pipeliner) error {
		for _, s := range order {
			// EVAL, not EVALSHA: a pipeline cannot fall back on NOSCRIPT;
			// the script's text is small beside the runs.
			recordScript.Eval(opCtx, p, []string{l.lockKey(s) + runsSuffix, l.lockKey(s) + unstartedSuffix}, args[s]...)
		}
		return nil
	})
	if err == nil {
		for _, c := range cmds {
			if _, err = replyInt(c.(*goredis.Cmd)); err != nil {
				break
			}
		}
	}
	if err != nil {
		return l.opError(ctx, "record runs", "", err)
	}
	return nil
}

// Runs returns up to limit runs of schedule, newest first.
func (l *Locker) Runs(ctx context.Context, schedule string, limit int) ([]cluster.Run, error) {
	if err := cluster.CheckSchedule(schedule); err != nil {
		return nil, err
	}
	if err := cluster.CheckLimit(limit); err != nil {
		return nil, err
	}
	if err := l.begin(ctx, "runs", schedule); err != nil {
		return nil, err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	vals, err := l.client.ZRevRange(opCtx, l.lockKey(schedule)+runsSuffix, 0, int64(limit-1)).Result()
	if err != nil {
		return nil, l.opError(ctx, "runs", schedule, err)
	}
	out := make([]cluster.Run, 0, len(vals))
	for _, v := range vals {
		r, err := decodeRun(v)
		if err != nil {
			return nil, fmt.Errorf("locking/redis: runs %q: %w", schedule, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// LastRuns returns the newest run of each schedule that has one: one
// pipelined round trip per lastRunsBatch schedules, whatever their slots.
func (l *Locker) LastRuns(ctx context.Context, schedules []string) (map[string]cluster.Run, error) {
	for _, s := range schedules {
		if err := cluster.CheckSchedule(s); err != nil {
			return nil, err
		}
	}
	if err := l.begin(ctx, "last runs", ""); err != nil {
		return nil, err
	}
	out := make(map[string]cluster.Run, len(schedules))
	for len(schedules) > 0 {
		batch := schedules[:min(len(schedules), lastRunsBatch)]
		schedules = schedules[len(batch):]
		opCtx, cancel := l.opContext(ctx)
		cmds := make([]*goredis.StringSliceCmd, len(batch))
		_, err := l.client.Pipelined(opCtx, func(p goredis.Pipeliner) error {
			for i, s := range batch {
				cmds[i] = p.ZRevRange(opCtx, l.lockKey(s)+runsSuffix, 0, 0)
			}
			return nil
		})
		cancel()
		if err != nil {
			return nil, l.opError(ctx, "last runs", "", err)
		}
		for i, c := range cmds {
			vals := c.Val()
			if len(vals) == 0 {
				continue
			}
			r, err := decodeRun(vals[0])
			if err != nil {
				return nil, fmt.Errorf("locking/redis: last runs %q: %w", batch[i], err)
			}
			out[batch[i]] = r
		}
	}
	return out, nil
}

// encodeRun is a run as stored: its JSON (without HTML escaping: '<', '>'
// and '&' are common in error lines), a newline, the output tail.
func encodeRun(r cluster.Run) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(320 + len(r.Error) + len(r.OutputTail))
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(storedRun{
		Schedule: r.Schedule, Tick: r.Tick.UnixMicro(), Node: r.Node, Result: r.Result,
		StartedAt: r.StartedAt.UnixMicro(), Duration: int64(r.Duration), Fence: r.Fence,
		Manual: r.Manual, Attempts: r.Attempts, Error: r.Error, RunID: r.RunID,
		Anomaly: r.Anomaly, By: r.By,
	})
	if err != nil {
		return nil, err
	}
	buf.WriteString(r.OutputTail) // Encode ended the JSON with the newline
	return buf.Bytes(), nil
}

func decodeRun(v string) (cluster.Run, error) {
	js, tail, ok := strings.Cut(v, "\n")
	var s storedRun
	if !ok {
		return cluster.Run{}, fmt.Errorf("%w: a stored run without its output", errReply)
	}
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		return cluster.Run{}, fmt.Errorf("%w: a stored run: %w", errReply, err)
	}
	return cluster.Run{
		Schedule: s.Schedule, Tick: time.UnixMicro(s.Tick), Node: s.Node, Result: s.Result,
		StartedAt: time.UnixMicro(s.StartedAt), Duration: time.Duration(s.Duration), Fence: s.Fence,
		Manual: s.Manual, Attempts: s.Attempts, Error: s.Error, RunID: s.RunID,
		OutputTail: tail, Anomaly: s.Anomaly, By: s.By,
	}, nil
}

// Announce records n as live for ttl from the server's time, which becomes
// its LastSeen. All nodes live in one hash, prefix{}:nodes, read whole by
// Nodes: a cluster has tens of nodes, not thousands.
func (l *Locker) Announce(ctx context.Context, n cluster.Node, ttl time.Duration) error {
	if err := cluster.CheckNode(n, ttl); err != nil {
		return err
	}
	if err := l.begin(ctx, "announce", n.NodeID); err != nil {
		return err
	}
	b, err := json.Marshal(storedNode{
		NodeID: n.NodeID, Version: n.Version, StartedAt: n.StartedAt.UnixMicro(),
		ConfigHash: n.ConfigHash, Schedules: n.Schedules, Fields: n.Fields, Tags: n.Tags,
		Ready: n.Ready, ClockOffsetNS: cluster.OffsetNanos(n.ClockOffset), Running: n.Running,
	})
	if err != nil {
		return fmt.Errorf("locking/redis: announce %q: %w", n.NodeID, err)
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	if _, err := replyInt(announceScript.Run(opCtx, l.client, []string{l.clusterKey(nodesSuffix)},
		n.NodeID, strconv.FormatInt(ttl.Microseconds(), 10), b)); err != nil {
		return l.opError(ctx, "announce", n.NodeID, err)
	}
	return nil
}

// Nodes returns the live nodes by the server's clock, sorted by NodeID;
// the script deletes the expired ones it finds.
func (l *Locker) Nodes(ctx context.Context) ([]cluster.Node, error) {
	if err := l.begin(ctx, "nodes", ""); err != nil {
		return nil, err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	v, err := nodesScript.Run(opCtx, l.client, []string{l.clusterKey(nodesSuffix)}).Result()
	if err != nil {
		return nil, l.opError(ctx, "nodes", "", err)
	}
	a, ok := v.([]any)
	if !ok || len(a)%2 != 0 {
		return nil, fmt.Errorf("locking/redis: nodes: %w: %T %v, want pairs of last seen and node", errReply, v, v)
	}
	out := make([]cluster.Node, 0, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		seen, ok1 := a[i].(int64)
		js, ok2 := a[i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("locking/redis: nodes: %w: %T, %T, want an integer and a string", errReply, a[i], a[i+1])
		}
		var s storedNode
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			return nil, fmt.Errorf("locking/redis: nodes: %w: a stored node: %w", errReply, err)
		}
		out = append(out, cluster.Node{
			NodeID: s.NodeID, Version: s.Version, StartedAt: time.UnixMicro(s.StartedAt),
			LastSeen: time.UnixMicro(seen), ConfigHash: s.ConfigHash, Schedules: s.Schedules, Fields: s.Fields, Tags: s.Tags,
			Ready: s.Ready, ClockOffset: cluster.OffsetFromNanos(s.ClockOffsetNS), Running: s.Running,
		})
	}
	slices.SortFunc(out, func(a, b cluster.Node) int { return cmp.Compare(a.NodeID, b.NodeID) })
	return out, nil
}

// Leave deletes the node's announcement.
func (l *Locker) Leave(ctx context.Context, nodeID string) error {
	if err := cluster.CheckNodeID(nodeID); err != nil {
		return err
	}
	if err := l.begin(ctx, "leave", nodeID); err != nil {
		return err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	if err := l.client.HDel(opCtx, l.clusterKey(nodesSuffix), nodeID).Err(); err != nil {
		return l.opError(ctx, "leave", nodeID, err)
	}
	return nil
}

// Enqueue appends requests to their schedules' queues (enqueue.lua, one
// round trip per schedule, in order of first appearance), then adds the
// schedules to the index Queued reads. The backfill check and the append
// are one step per schedule; requests of several schedules are not one
// step (their queues live in different slots): a refused backfill stops
// the call, leaving enqueued the schedules with a backfill that came
// before it (those with triggers only come after).
func (l *Locker) Enqueue(ctx context.Context, reqs []cluster.Request) error {
	for _, r := range reqs {
		if err := cluster.CheckRequest(r); err != nil {
			return err
		}
	}
	if err := l.begin(ctx, "enqueue", ""); err != nil {
		return err
	}
	var order []string
	bySchedule := make(map[string][]any)
	backfill := make(map[string]bool)
	for _, r := range reqs {
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("locking/redis: enqueue %q: %w", r.Schedule, err)
		}
		if _, ok := bySchedule[r.Schedule]; !ok {
			order = append(order, r.Schedule)
			bySchedule[r.Schedule] = []any{"0"}
		}
		bySchedule[r.Schedule] = append(bySchedule[r.Schedule], b)
		backfill[r.Schedule] = backfill[r.Schedule] || r.Backfill
	}
	// Schedules with a backfill first: the usual refusal (one schedule's
	// second backfill) then comes before anything else of the call is
	// stored.
	slices.SortStableFunc(order, func(a, b string) int {
		switch {
		case backfill[a] == backfill[b]:
			return 0
		case backfill[a]:
			return -1
		}
		return 1
	})
	for _, s := range order {
		args := bySchedule[s]
		if backfill[s] {
			args[0] = "1"
		}
		opCtx, cancel := l.opContext(ctx)
		n, err := replyInt(enqueueScript.Run(opCtx, l.client, []string{l.lockKey(s) + requestsSuffix}, args...))
		cancel()
		switch {
		case err != nil:
			return l.opError(ctx, "enqueue", s, err)
		case n < 0:
			return fmt.Errorf("locking/redis: enqueue %q: %w", s, cluster.ErrBusy)
		}
		// After the append: a node that empties the queue meanwhile and
		// removes the id (see unindex) either sees this request or runs
		// before this SADD.
		opCtx, cancel = l.opContext(ctx)
		err = l.client.SAdd(opCtx, l.clusterKey(queuedSuffix), s).Err()
		cancel()
		if err != nil {
			return l.opError(ctx, "enqueue", s, err)
		}
	}
	return nil
}

// Queued returns the ids in the index of schedules with requests, sorted.
// It is a hint kept best-effort (the queue and the index live in different
// slots): an id whose queue is empty is answered by TakeRequest with an
// empty queue, which also removes it.
func (l *Locker) Queued(ctx context.Context) ([]string, error) {
	if err := l.begin(ctx, "queued", ""); err != nil {
		return nil, err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	ids, err := l.client.SMembers(opCtx, l.clusterKey(queuedSuffix)).Result()
	if err != nil {
		return nil, l.opError(ctx, "queued", "", err)
	}
	slices.Sort(ids)
	return ids, nil
}

// Requests returns a schedule's queue, oldest first.
func (l *Locker) Requests(ctx context.Context, schedule string) ([]cluster.Request, error) {
	if err := cluster.CheckSchedule(schedule); err != nil {
		return nil, err
	}
	if err := l.begin(ctx, "requests", schedule); err != nil {
		return nil, err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	vals, err := l.client.LRange(opCtx, l.lockKey(schedule)+requestsSuffix, 0, -1).Result()
	if err != nil {
		return nil, l.opError(ctx, "requests", schedule, err)
	}
	out := make([]cluster.Request, 0, len(vals))
	for _, v := range vals {
		r, err := decodeRequest(v)
		if err != nil {
			return nil, fmt.Errorf("locking/redis: requests %q: %w", schedule, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// TakeRequest runs take.lua: the schedule's lock (acquire.lua's grant, the
// same fence), the queue's head, a trigger's removal, the accepted record
// and the take's record (for its resends), in one step in the schedule's
// slot. The handle is an ordinary lock of the schedule: Renew and Release
// as for TryLock.
func (l *Locker) TakeRequest(ctx context.Context, r cluster.TakeReq) (cluster.Taken, error) {
	if err := cluster.CheckTake(r); err != nil {
		return cluster.Taken{}, err
	}
	schedule, ttl := r.Schedule, r.TTL
	if err := l.begin(ctx, "take request", schedule); err != nil {
		return cluster.Taken{}, err
	}
	token, keep := r.Token, cluster.TakeKeep(ttl).Milliseconds()
	if token == "" {
		var err error
		if token, err = locking.NewToken(); err != nil {
			return cluster.Taken{}, err
		}
		keep = 0 // the caller cannot resend it: nothing to keep
	}
	lockKey := l.lockKey(schedule)
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	v, err := takeScript.Run(opCtx, l.client,
		[]string{lockKey, lockKey + fenceSuffix, lockKey + requestsSuffix, lockKey + takenSuffix + token},
		token, l.holderArg, ttl.Milliseconds(), r.Node, lockKey+acceptedSuffix, keep).Result()
	if err != nil {
		return cluster.Taken{}, l.opError(ctx, "take request", schedule, err)
	}
	code, fence, head, left, err := takeReply(v)
	if err != nil {
		return cluster.Taken{}, fmt.Errorf("locking/redis: take request %q: %w", schedule, err)
	}
	if left == 0 {
		// The queue is empty now: take the schedule off the index.
		if err := l.unindex(ctx, schedule); err != nil && code != takeTaken {
			return cluster.Taken{}, err
		}
		// With a lock taken, a stale hint is not worth losing the
		// request for: the next TakeRequest removes it again.
	}
	if code == takeEmpty {
		return cluster.Taken{}, nil
	}
	req, err := decodeRequest(head)
	if err != nil {
		// Unreadable yet taken: give the lock back rather than hold it
		// for nothing until it expires.
		if code == takeTaken {
			opCtx, cancel := l.opContext(context.WithoutCancel(ctx))
			_ = releaseScript.Run(opCtx, l.client, []string{lockKey}, l.storedValue(token, fence)).Err()
			cancel()
		}
		return cluster.Taken{}, fmt.Errorf("locking/redis: take request %q: %w", schedule, err)
	}
	if code == takeRequeued {
		// A resent take's trigger went back to its queue: indexed again,
		// for the nodes polling (after the push, as Enqueue does).
		opCtx, cancel := l.opContext(ctx)
		err := l.client.SAdd(opCtx, l.clusterKey(queuedSuffix), schedule).Err()
		cancel()
		if err != nil {
			return cluster.Taken{}, l.opError(ctx, "take request", schedule, err)
		}
		code = takeContended
	}
	if code == takeContended {
		return cluster.Taken{Request: &req, Contended: true}, nil
	}
	h, err := l.track(ctx, schedule, newHeld(lockKey), token, token, fence, ttl)
	if err != nil {
		return cluster.Taken{}, err
	}
	return cluster.Taken{Request: &req, Handle: h}, nil
}

// GiveBack runs giveback.lua: h's lock released if still h's, and the
// take's trigger back at the head of its queue while its record is there
// (cluster.Store.GiveBack); then the schedule indexed again while its
// queue has anything (after the push, as Enqueue does; on a resend too, so
// that an index update lost with the first reply is made).
func (l *Locker) GiveBack(ctx context.Context, h *locking.Handle) error {
	st, err := l.state(h)
	if err != nil {
		return err
	}
	if err := canceled(ctx, "give back", h); err != nil {
		return err
	}
	schedule := h.Key()
	lockKey := l.lockKey(schedule)
	opCtx, cancel := l.opContext(ctx)
	v, err := giveBackScript.Run(opCtx, l.client,
		[]string{lockKey, lockKey + requestsSuffix, lockKey + takenSuffix + h.Token()}, st.args[0], h.Token()).Result()
	cancel()
	if err != nil {
		return l.opError(ctx, "give back", schedule, err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 3 {
		return fmt.Errorf("locking/redis: give back %q: %w: %T %v, want 3 elements", schedule, errReply, v, v)
	}
	if n, ok := a[0].(int64); ok && n == 1 {
		l.forget(h)
	}
	if n, ok := a[2].(int64); ok && n > 0 {
		opCtx, cancel := l.opContext(ctx)
		err := l.client.SAdd(opCtx, l.clusterKey(queuedSuffix), schedule).Err()
		cancel()
		if err != nil {
			return l.opError(ctx, "give back", schedule, err)
		}
	}
	return nil
}

// takeReply decodes take.lua's reply strictly: {code, fence, request, left}.
func takeReply(v any) (code, fence int64, head string, left int64, err error) {
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return 0, 0, "", 0, fmt.Errorf("%w: %T %v, want 4 elements", errReply, v, v)
	}
	code, ok1 := a[0].(int64)
	fence, ok2 := a[1].(int64)
	head, ok3 := a[2].(string)
	left, ok4 := a[3].(int64)
	switch {
	case !ok1 || !ok2 || !ok3 || !ok4:
		return 0, 0, "", 0, fmt.Errorf("%w: %T, %T, %T, %T, want integer, integer, string, integer", errReply, a[0], a[1], a[2], a[3])
	case code == takeTaken && fence <= 0:
		return 0, 0, "", 0, fmt.Errorf("%w: taken with fence %d", errReply, fence)
	case code != takeEmpty && code != takeTaken && code != takeContended && code != takeRequeued:
		return 0, 0, "", 0, fmt.Errorf("%w: code %d", errReply, code)
	}
	return code, fence, head, left, nil
}

// Done removes a finished backfill tick from the head of its queue, and
// the schedule from the index once its queue is empty.
func (l *Locker) Done(ctx context.Context, req cluster.Request) error {
	if err := cluster.CheckRequest(req); err != nil {
		return err
	}
	if err := l.begin(ctx, "done", req.Schedule); err != nil {
		return err
	}
	if !req.Backfill {
		return nil // a trigger left the queue when it was taken
	}
	opCtx, cancel := l.opContext(ctx)
	left, err := replyInt(doneScript.Run(opCtx, l.client, []string{l.lockKey(req.Schedule) + requestsSuffix}, req.ID))
	cancel()
	if err != nil {
		return l.opError(ctx, "done", req.Schedule, err)
	}
	if left == 0 {
		return l.unindex(ctx, req.Schedule)
	}
	return nil
}

// unindex removes schedule from the index of queued schedules, then looks
// at its queue again and puts it back if a request arrived meanwhile.
// Enqueue appends before it indexes, so whichever order the two calls run
// in, a queued request stays indexed: if its append came before our second
// look, we put the id back; if after, its SADD comes after our SREM. Three
// round trips, only when a queue runs empty.
func (l *Locker) unindex(ctx context.Context, schedule string) error {
	qk := l.clusterKey(queuedSuffix)
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	if err := l.client.SRem(opCtx, qk, schedule).Err(); err != nil {
		return l.opError(ctx, "unindex", schedule, err)
	}
	n, err := l.client.LLen(opCtx, l.lockKey(schedule)+requestsSuffix).Result()
	if err == nil && n > 0 {
		err = l.client.SAdd(opCtx, qk, schedule).Err()
	}
	if err != nil {
		return l.opError(ctx, "unindex", schedule, err)
	}
	return nil
}

// Accepted reports the node that took request id, "" while nobody has.
func (l *Locker) Accepted(ctx context.Context, schedule, id string) (string, error) {
	if err := cluster.CheckSchedule(schedule); err != nil {
		return "", err
	}
	if id == "" {
		return "", fmt.Errorf("%w: empty request id", cluster.ErrInvalid)
	}
	if err := l.begin(ctx, "accepted", schedule); err != nil {
		return "", err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	node, err := l.client.Get(opCtx, l.lockKey(schedule)+acceptedSuffix+id).Result()
	if errors.Is(err, goredis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", l.opError(ctx, "accepted", schedule, err)
	}
	return node, nil
}

// Held reports whether the schedule's own lock exists now.
func (l *Locker) Held(ctx context.Context, schedule string) (bool, error) {
	if err := cluster.CheckSchedule(schedule); err != nil {
		return false, err
	}
	if err := l.begin(ctx, "held", schedule); err != nil {
		return false, err
	}
	opCtx, cancel := l.opContext(ctx)
	defer cancel()
	n, err := l.client.Exists(opCtx, l.lockKey(schedule)).Result()
	if err != nil {
		return false, l.opError(ctx, "held", schedule, err)
	}
	return n == 1, nil
}

// clusterKey is the key of cluster-wide state: prefix{} + suffix.
func (l *Locker) clusterKey(suffix string) string {
	return l.prefix + clusterTag + suffix
}

// begin checks that the Locker is open and ctx not done, before any round
// trip.
func (l *Locker) begin(ctx context.Context, op, key string) error {
	if err := l.checkOpen(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		if key != "" {
			return fmt.Errorf("locking/redis: %s %q: %w", op, key, context.Cause(ctx))
		}
		return fmt.Errorf("locking/redis: %s: %w", op, context.Cause(ctx))
	}
	return nil
}

func decodeRequest(v string) (cluster.Request, error) {
	var r cluster.Request
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return cluster.Request{}, fmt.Errorf("%w: a stored request: %w", errReply, err)
	}
	return r, nil
}
