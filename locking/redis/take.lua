-- take: TakeRequest, the schedule's lock and the head of its request queue
-- in one atomic step (lib.lua is prepended).
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] request queue (a list of
-- JSON requests, oldest first), KEYS[4] the taken record, all in the
-- schedule's hash slot; ARGV[1] token, ARGV[2] '' or '|' .. holder, ARGV[3]
-- ttl in ms, ARGV[4] node id, ARGV[5] the prefix of the accepted records
-- (KEYS[1] .. ':accepted:'; the record's name holds the request's id, which
-- only this script reads, so it is built here, in the same slot).
-- Returns {code, fence, request, left}: code 0 empty queue (nothing taken),
-- 1 taken (fence set), 2 the lock is held (contended); request is the head
-- ('' when empty), left the queue's length after the step.
local token, holder, ttl, node, accepted = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

-- One day: how long `trigger` can learn which node accepted its request.
local accepted_ttl = 86400

local held = redis.call('GET', KEYS[1])
if held then
  -- A resent call (its first reply lost) finds its own lock: answer with
  -- what the first run took, kept in the taken record, not with the head
  -- now (the first run popped a trigger: answering with the next one would
  -- lose it and take another).
  local fence = own_fence(held, token, holder)
  if fence then
    local t = redis.call('GET', KEYS[4])
    local p = token .. ' '
    if t and string.sub(t, 1, #p) == p then
      redis.call('PEXPIRE', KEYS[1], ttl)
      return {1, fence, string.sub(t, #p + 1), redis.call('LLEN', KEYS[3])}
    end
  end
end

local head = redis.call('LINDEX', KEYS[3], 0)
if not head then
  return {0, 0, '', 0}
end
if held then
  return {2, 0, head, redis.call('LLEN', KEYS[3])}
end

local req = cjson.decode(head)
local now, now_s = clock()
local fence = grant(KEYS[1], KEYS[2], nil, token, holder, ttl, now, now_s)
-- A trigger leaves the queue in this step: no other node can take it. A
-- backfill tick stays at the head until Done, so that a node dying
-- mid-run leaves it to the next one once the lock is free.
if req.backfill ~= true then
  redis.call('LPOP', KEYS[3])
end
redis.call('SET', accepted .. req.id, node, 'EX', accepted_ttl)
redis.call('SET', KEYS[4], token .. ' ' .. head, 'PX', ttl)
return {1, fence, head, redis.call('LLEN', KEYS[3])}
