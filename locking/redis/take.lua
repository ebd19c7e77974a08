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
-- Returns {code, fence, request, left}: code 0 nothing taken (an empty
-- queue, or the token of a trigger's take whose taker was heard),
-- 1 taken (fence set), 2 the lock is held (contended), 3 contended for a
-- resent take whose trigger went back to the head of the queue (the caller
-- indexes the schedule again); request is the head ('' when empty), left
-- the queue's length after the step plus the triggers of takes not heard
-- back yet (the schedule stays indexed until they are).
--
-- A trigger taken with a token is also kept, until its taker is heard
-- from, in the hash KEYS[1] .. ':pending' (token -> the first take's fence
-- and the request's JSON, space-separated; built here, in the same slot):
-- renew.lua, release.lua and releases.lua delete the token's field when
-- they renew or release the take's lock, the taker's word that it heard.
-- A take that finds the lock free puts every trigger still pending back
-- at the head of the queue, oldest take first, before it takes the head:
-- the taker never started it (the scheduler renews a manual run's lock
-- before the run starts), and without this a trigger whose take's replies
-- were all lost would be run nowhere (memory's requeueLapsed).
local token, holder, ttl, node, accepted, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local pending = KEYS[1] .. ':pending'

local function left()
  return redis.call('LLEN', KEYS[3]) + redis.call('HLEN', pending)
end

-- One day: how long `trigger` can learn which node accepted its request.
local accepted_ttl = 86400

local held = redis.call('GET', KEYS[1])

-- take_lock takes the lock for req (its JSON head) and records the take
-- and its acceptance.
local function take_lock(req, head)
  local now, now_s = clock()
  local fence, fence_s = grant(KEYS[1], KEYS[2], nil, token, holder, ttl, now, now_s)
  redis.call('SET', accepted .. req.id, node, 'EX', accepted_ttl)
  if keep ~= '0' then
    redis.call('SET', KEYS[4], head, 'PX', keep)
    if req.backfill ~= true then
      redis.call('HSETNX', pending, token, fence_s .. ' ' .. head)
    end
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
if rec and redis.call('HEXISTS', pending, token) == 0 and cjson.decode(rec).backfill ~= true then
  -- A trigger's take whose taker was heard (its renewal or release took
  -- the token off the pending hash): a late copy of it, or the token
  -- reused. It takes nothing, and leaves the record to the take's
  -- give-back: answered from the record it would take or put back a
  -- trigger that ran; a fresh take would replace the record, and the
  -- give-back would put back another trigger and lose its own.
  return {0, 0, '', left()}
end
if rec then
  local fence = held and own_fence(held, token, holder)
  if fence then
    -- Its own lock: extended as a renewal would.
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[4], keep)
    return {1, fence, rec, left()}
  end
  local req = cjson.decode(rec)
  if req.backfill ~= true then
    if not held then
      -- Its lock ended before the taker heard: only this record holds
      -- the trigger. Taken again for it.
      return {1, take_lock(req, rec), rec, left()}
    end
    -- Another holds the lock: back to the head of the queue for whoever
    -- takes it next; this record no longer answers for it.
    redis.call('LPUSH', KEYS[3], rec)
    redis.call('DEL', KEYS[4])
    redis.call('HDEL', pending, token)
    return {3, 0, rec, left()}
  end
  -- A backfill whose lock ended stayed queued until Done: a fresh take
  -- decides.
  redis.call('DEL', KEYS[4])
end

if not held then
  -- The lock is free: the triggers whose takes were never heard back go
  -- back to the head of the queue, the oldest take first, and their
  -- records with them (a resend of such a take is a fresh one).
  local p = redis.call('HGETALL', pending)
  if #p > 0 then
    local back = {}
    for i = 1, #p, 2 do
      local f, r = string.match(p[i + 1], '^(%d+) (.*)$')
      back[#back + 1] = {f, p[i], r}
      redis.call('DEL', KEYS[1] .. ':taken:' .. p[i])
    end
    -- Newest first (fences compared as decimals: by length, then
    -- digits), each pushed in front of the ones before: the oldest ends
    -- up at the head.
    table.sort(back, function(x, y)
      if #x[1] ~= #y[1] then
        return #x[1] > #y[1]
      end
      if x[1] ~= y[1] then
        return x[1] > y[1]
      end
      return x[2] > y[2]
    end)
    for _, b in ipairs(back) do
      redis.call('LPUSH', KEYS[3], b[3])
    end
    redis.call('DEL', pending)
  end
end

local head = redis.call('LINDEX', KEYS[3], 0)
if not head then
  return {0, 0, '', left()}
end
if held then
  return {2, 0, head, left()}
end

local req = cjson.decode(head)
-- A trigger leaves the queue in this step: no other node can take it. A
-- backfill tick stays at the head until Done, so that a node dying
-- mid-run leaves it to the next one once the lock is free.
if req.backfill ~= true then
  redis.call('LPOP', KEYS[3])
end
local fence = take_lock(req, head)
return {1, fence, head, left()}
