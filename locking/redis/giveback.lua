-- giveback: GiveBack, a take whose run will not start
-- (cluster.Store.GiveBack), in one atomic step.
-- KEYS[1] lock key, KEYS[2] request queue, KEYS[3] the take's record
-- (KEYS[1] .. ':taken:' .. token), all in the schedule's hash slot;
-- ARGV[1] the lock's stored value (as release.lua), ARGV[2] the token.
-- Returns {released, requeued, queue length}.
--
-- The record outlives the taker's renewal and release (they only take the
-- token off the pending hash: take.lua), so a trigger whose confirming
-- renewal was applied with its reply lost is still here to put back. A
-- trigger still pending is put back from its pending field even when its
-- record expired. Take.lua drops both when it puts a trigger back itself,
-- and so does this script: a second give-back, or one after the backend
-- put the trigger back (another node may have taken it since), finds
-- neither, and puts nothing back.
local released = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  released = 1
end
local pending = KEYS[1] .. ':pending'
local rec = redis.call('GET', KEYS[3])
local p = redis.call('HGET', pending, ARGV[2])
if p then
  redis.call('HDEL', pending, ARGV[2])
  if not rec then
    rec = string.match(p, '^%d+ (.*)$')
  end
end
local requeued = 0
if rec then
  redis.call('DEL', KEYS[3])
  local req = cjson.decode(rec)
  if req.backfill ~= true then
    redis.call('LPUSH', KEYS[2], rec)
    requeued = 1
  end
end
return {released, requeued, redis.call('LLEN', KEYS[2])}
