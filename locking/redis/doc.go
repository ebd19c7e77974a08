// Package redis is the Redis lock backend: single-instance Redlock on
// go-redis/v9. It owns the key layout, the Lua scripts and the mapping of
// Redis failures to the locking package's sentinel errors.
//
// # Operations
//
// Every operation is one round trip, bounded by Options.OpTimeout:
//
//   - try-lock runs acquire.lua: if the lock is free, SET it with PX ttl
//     and draw the key's next fence, atomically. The reply is the fence, or
//     0 when someone else holds the lock.
//   - try-lock-tick runs tick.lua: the decision of locking.DecideTick
//     (resent call, ahead, done, paused, missed, contended, granted) made
//     in one script on the server's clock (TIME), reading and raising the
//     key's tick mark and reading its pause flag. The reply is five
//     integers: verdict, fence, mark, the server's time, ahead offset; a
//     step that raised the mark to T answers the mark before it
//     (locking.TickAnswer.Before; 0 for none) in the mark's place.
//   - renew runs renew.lua: PEXPIRE only if the lock still holds our value.
//   - release runs release.lua: DEL only if the lock still holds our value.
//   - InitMarks creates absent marks at the server's time (SET NX), one
//     pipelined round trip per 500 keys; SetPause and GetPause write and
//     read the pause flag.
//
// The Locker is also the cluster.Store (history, nodes, manual run
// requests), off the tick's critical path:
//
//   - RecordRuns runs record.lua per schedule (ZADD, then ZREMRANGEBYRANK
//     to keep, atomically), all schedules in one pipelined round trip; a
//     run recorded unstarted (Attempts 0) is indexed by run id in a hash
//     beside the history, so the real run of that id replaces it (a
//     provisional record, Result running, looks for its final among the
//     runs of its StartedAt only); LastRuns reads the newest run of 500
//     schedules per round trip.
//   - RecordSkips runs skips.lua per schedule (ZADD of each skip whose
//     tick, its score, is not there yet, then ZREMRANGEBYRANK to keep,
//     atomically) on a key of its own beside the history, all schedules in
//     one pipelined round trip.
//   - TakeRequest runs take.lua: the schedule's lock (the grant and fence of
//     acquire.lua), the head of its request queue, a trigger's LPOP and the
//     accepted record, in one step; a backfill tick stays at the head until
//     Done (done.lua) removes it.
//   - Announce and Nodes run announce.lua and nodes.lua on the server's
//     clock; Nodes deletes the expired announcements it finds.
//
// Scripts run by EVALSHA and fall back to EVAL after a restart flushed
// the script cache. Replies are decoded strictly as integers: a 0, a nil or
// a reply of any other type is never taken for success.
//
// Microsecond times and fences (about 1.8e15) are exact in Lua's numbers
// but print as 1.7960416032329e+15, so the scripts never build a string
// from one: what they write is a string the caller passed, one made from
// TIME's own strings, or one Redis made (INCR); what they return are
// integers.
//
// # Keys
//
// For prefix P and key K (everything in K's hash slot, the braces making K
// a Redis Cluster hash tag, so one script can touch them all):
//
//	P{K}            the lock (try-lock, and try-lock-tick for the schedule)
//	P{K}:tick:<T>   a per-tick lock (TickRequest.PerTick), T in µs since
//	                the epoch; List shows it as locking.TickLockKey
//	P{K}:fence      the fencing counter, shared by all of K's locks
//	P{K}:mark       the tick mark, T in µs as a decimal string; no expiry
//	P{K}:pause      the pause flag, a hash: note, and until (µs) when set
//	P{K}:runs       the history: a sorted set of runs (JSON, a newline,
//	                the output tail as is), scored by
//	                StartedAt in µs, trimmed to keep by every write
//	P{K}:requests   the manual run requests: a list of JSON, oldest first
//	P{K}:accepted:<id>  the node that took request id; expires after a day
//	<lock>:grant:<token@T>  a try-lock-tick's grant record (its fence '/'
//	                the step's Before, µs, 0: none), or a resend's verdict
//	                ('c' contended, 'd' done), or a paused or missed
//	                verdict ('p', 'm', then the step's Before), kept
//	                locking.GrantKeep; <lock> is P{K} or a per-tick lock
//	                (tickstep.lua)
//	P{K}:taken:<token>  the request a take (TakeRequest) took, kept twice
//	                its TTL, so a resent take.lua answers with what the
//	                first attempt took
//
// and for the whole cluster, under the empty hash tag (no key is empty, so
// none of K's keys can be these; Redis Cluster hashes the whole key):
//
//	P{}:nodes       a hash: node id -> last seen µs|ttl µs|JSON; the hash
//	                expires with its longest-lived node
//	P{}:queued      a set of the schedules with requests queued: a hint
//	                for the nodes polling for work (Enqueue adds after
//	                appending; a take or Done that empties a queue removes
//	                the id, then looks again and puts it back if a request
//	                arrived meanwhile)
//
// Nothing but a lock (P{K}) or a per-tick lock ends with '}' or with
// "}:tick:" and digits, which is how List tells locks apart.
//
// A lock's value is its random token, "#", the fence it drew, then "|" and
// Options.Holder when set; a try-lock-tick's token is followed by "@" and
// its T in microseconds. Keeping the fence with the lock answers a resent
// call (same token, same T) with its own fence even when another lock of
// the key (a later tick's) drew a higher one since; keeping T with the
// token makes another T asked with a granted call's token no resend. List
// shows the holder, never the token.
//
// # Fences
//
// The fencing counter never expires, so fences keep increasing across
// lock expiries and releases. Every acquisition draws the larger of the
// counter plus one and the server's clock in microseconds. So when Redis
// loses or rewinds data (a restart without persistence, an AOF everysec
// crash, a failover to a replica that had not received the last writes,
// FLUSHALL, a switch to Postgres and back), the next fence is still above
// every fence handed out before, and a resource that refuses fences lower
// than the highest it has seen still refuses a stale holder and accepts
// the new one. What no lock service can prevent after data loss is two
// holders at once (the old one stalled, the new one granted by the empty
// Redis); fencing is what makes that harmless. This assumes the server's
// clock does not step back by more than the time since the lost data was
// written, and fewer than a million acquisitions a second per key.
//
// # Durability
//
// Locks and tick marks live in Redis memory: run it with persistence
// (appendonly yes, or at least RDB snapshots) and maxmemory-policy
// noeviction (an evicted lock is a second holder, an evicted mark a second
// run). Locker.Durability reads both settings with CONFIG GET and returns
// a warning naming each one that is not so (or one saying they are
// unchecked where CONFIG is refused). A mark Redis lost is raised back by
// the caller's TickRequest.Floor.
//
// # Failover
//
// Redis replicates asynchronously, and TestRedisClusterFailover and
// TestRedisSentinelFailover show what that means for locks. A graceful
// failover (CLUSTER FAILOVER, which lets the replica catch up first) loses
// nothing: held locks renew on the promoted replica and no tick runs
// twice. A failover to a replica that lagged (SENTINEL FAILOVER, a master
// killed before its last writes reached the replica) loses those writes: a
// lock taken then reads as lost at its next renewal (ErrLockLost), and the
// mark of a tick decided then is gone, so that tick is done only for the
// nodes that pass it as their Floor; a node that never saw it decided can
// be granted it again. Fences still increase across any failover (they are
// floored at the server's clock), so a fenced write of the first run is
// refused after the second began. During a Sentinel failover both the old
// and the new primary accept writes for a moment, until the Sentinel
// demotes the old one. On a Cluster whose master died with no replica to
// promote, that master's keys fail with ErrUnavailable (the scheduler's
// backend_error) while the other masters keep serving, provided
// cluster-require-full-coverage is no; with the default (yes) the whole
// cluster refuses commands once the master is marked failed.
//
// # URLs
//
// Open accepts:
//
//	redis://[user:password@]host[:port][/db][?option=value...]
//	rediss://...                    TLS, the server certificate verified
//	unix://[user:password@]/path/to/redis.sock[?db=N]
//	redis://[user:password@]h1:26379,h2:26379[/db]?master_name=NAME
//	                                Sentinel: the hosts are Sentinels; the
//	                                user info authenticates to them, and
//	                                username= and password= options to the
//	                                master (go-redis's convention)
//	redis://[user:password@]h1:6379,h2:6379
//	                                Cluster: two or more seed nodes and no
//	                                master_name; database 0 only
//
// More addresses may also be given as addr=host:port options, as go-redis
// does. The options are go-redis's (dial_timeout, pool_size, protocol,
// skip_verify, ...); unknown ones are errors. Options that read locks from
// replicas (read_only, replica_only, route_by_latency, route_randomly)
// are refused: a lock must be read where it is written. The dial, read, write and pool
// timeouts are capped at OpTimeout, so a hung server becomes an error in
// bounded time. Open never connects: go-redis dials on first use, and a
// node starts while Redis is down.
//
// # Errors
//
// Transport failures, error replies and deadlines passing mid-call (ours
// or the caller's) wrap locking.ErrUnavailable with the cause kept (%w);
// a cancelled caller context is reported as such. A refusal to the
// configured user (NOPERM: an ACL user without the command or key;
// WRONGPASS, NOAUTH) wraps locking.ErrPermission instead. A
// lock that expired or was taken over is locking.ErrLockLost. A URL that
// cannot be parsed is locking.ErrInvalid, with any password redacted.
//
// A try-lock whose reply is lost (a timeout after Redis ran the script)
// may leave a lock that no handle owns; it expires with its TTL. go-redis
// resends a command by itself when the connection ended before the reply
// (EOF, as TestResentTickAnsweredGranted shows), and both acquire.lua and
// tick.lua answer a resend of their own acquisition (same token and
// holder) with the fence it drew and a fresh lease, so a retry never
// reports "held" or "done" for a lock it took. A caller that resends after
// an error passes the first attempt's token in TickRequest.Token for the
// same answer.
package redis
