-- take: TakeRequest, the schedule's lock and the head of its request queue
-- in one atomic step (lib.lua is prepended).
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] request queue (a list of
-- JSON requests, oldest first), KEYS[4] the take's record (KEYS[1] ..
-- ':taken:' .. token), all in the schedule's hash slot; ARGV[1] token,
-- ARGV[2] '' or '|' .. holder, ARGV[3] ttl in ms, ARGV[4] node id, ARGV[5]
-- the prefix of the accepted records (KEYS[1] .. ':accepted:'; the record's
-- name holds the request's id, which only this script reads, so it is built
-- here, in the same slot), ARGV[6] how long the take's record is kept in
-- ms ('0': none, the take cannot be resent).
-- Returns {code, fence, request, left}: code 0 empty queue (nothing taken),
-- 1 taken (fence set), 2 the lock is held (contended), 3 contended for a
-- resent take whose trigger went back to the head of the queue (the caller
-- indexes the schedule again); request is the head ('' when empty), left
-- the queue's length after the step.
local token, holder, ttl, node, accepted, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]

-- One day: how long `trigger` can learn which node accepted its request.
local accepted_ttl = 86400

local held = redis.call('GET', KEYS[1])

-- take_lock takes the lock for req (its JSON head) and records the take
-- and its acceptance.
local function take_lock(req, head)
  local now, now_s = clock()
  local fence = grant(KEYS[1], KEYS[2], nil, token, holder, ttl, now, now_s)
  redis.call('SET', accepted .. req.id, node, 'EX', accepted_ttl)
  if keep ~= '0' then
    redis.call('SET', KEYS[4], head, 'PX', keep)
  end
  return fence
end

-- A resent take (its first reply lost) is answered from its record, not
-- from the head now: the first popped a trigger, and answering with the
-- next one would lose it and take another.
local rec = false
if keep ~= '0' then
  rec = redis.call('GET', KEYS[4])
end
if rec then
  local fence = held and own_fence(held, token, holder)
  if fence then
    -- Its own lock: extended as a renewal would.
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[4], keep)
    return {1, fence, rec, redis.call('LLEN', KEYS[3])}
  end
  local req = cjson.decode(rec)
  if req.backfill ~= true then
    if not held then
      -- Its lock ended before the taker heard: only this record holds
      -- the trigger. Taken again for it.
      return {1, take_lock(req, rec), rec, redis.call('LLEN', KEYS[3])}
    end
    -- Another holds the lock: back to the head of the queue for whoever
    -- takes it next; this record no longer answers for it.
    redis.call('LPUSH', KEYS[3], rec)
    redis.call('DEL', KEYS[4])
    return {3, 0, rec, redis.call('LLEN', KEYS[3])}
  end
  -- A backfill whose lock ended stayed queued until Done: a fresh take
  -- decides.
  redis.call('DEL', KEYS[4])
end

local head = redis.call('LINDEX', KEYS[3], 0)
if not head then
  return {0, 0, '', 0}
end
if held then
  return {2, 0, head, redis.call('LLEN', KEYS[3])}
end

local req = cjson.decode(head)
-- A trigger leaves the queue in this step: no other node can take it. A
-- backfill tick stays at the head until Done, so that a node dying
-- mid-run leaves it to the next one once the lock is free.
if req.backfill ~= true then
  redis.call('LPOP', KEYS[3])
end
local fence = take_lock(req, head)
return {1, fence, head, redis.call('LLEN', KEYS[3])}
