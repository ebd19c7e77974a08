// Package redis is the Redis lock backend: single-instance Redlock on
// go-redis/v9. It owns the key layout, the Lua scripts and the mapping of
// Redis failures to the locking package's sentinel errors.
//
// # Operations
//
// Every operation is one round trip, bounded by Options.OpTimeout:
//
//   - try-lock runs acquire.lua: SET lock value NX PX ttl and, only if that
//     took the lock, INCR of the key's fencing counter, atomically. The
//     reply is the new fence, or 0 when someone else holds the lock.
//   - renew runs renew.lua: PEXPIRE only if the lock still holds our value.
//   - release runs release.lua: DEL only if the lock still holds our value.
//
// Scripts run by EVALSHA and fall back to EVAL after a restart flushed
// the script cache. Replies are decoded strictly as integers: a 0, a nil or
// a reply of any other type is never taken for success.
//
// # Keys
//
// For prefix P and key K, the lock is P{K} and its fencing counter
// P{K}:fence. The braces make K a Redis Cluster hash tag, so the two share
// a slot and one script can touch both. The stored value is the handle's
// random token, then "|" and Options.Holder when set; List shows the
// holder, never the token.
//
// The fencing counter never expires, so fences keep increasing across
// lock expiries and releases. A new counter starts at the Redis server's
// clock in microseconds, not at 1: if Redis loses its data (a restart
// without persistence, a failover to a replica that had not received the
// last writes, FLUSHALL), the counter restarts above every fence handed out
// before, so a resource that refuses fences lower than the highest it has
// seen still refuses a stale holder and accepts the new one. What no lock
// service can prevent after data loss is two holders at once (the old one
// stalled, the new one granted by the empty Redis); fencing is what makes
// that harmless. This assumes the server's clock does not step back by more
// than the time since the lost data was written, and fewer than a million
// acquisitions a second per key. Use persistence (appendonly) where it
// matters; DESIGN says single-instance Redlock for this reason.
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
// a cancelled caller context is reported as such. A
// lock that expired or was taken over is locking.ErrLockLost. A URL that
// cannot be parsed is locking.ErrInvalid, with any password redacted.
//
// A try-lock whose reply is lost (a timeout after Redis ran the script)
// may leave a lock that no handle owns; it expires with its TTL. go-redis
// resends a command only when the connection failed before a reply, and
// acquire.lua answers a resend of its own acquisition with the fence it
// drew, so a retry never reports "held" for a lock it took.
package redis
