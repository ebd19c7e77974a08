-- done: remove a finished backfill tick from its queue, wherever it is:
-- a trigger put back at the head while it ran (a give-back, an unheard
-- take's requeue) must not keep it queued, to run again.
-- KEYS[1] the request queue; ARGV[1] the request's id.
-- Returns the queue's length after the step. A queue without that
-- backfill request (already removed, or never a backfill) is left alone.
local function mine(it)
  local req = cjson.decode(it)
  return req.backfill == true and req.id == ARGV[1]
end
-- The head first: where the tick nearly always is, one decode rather
-- than a scan of a backfill of up to 1,000 ticks.
local head = redis.call('LINDEX', KEYS[1], 0)
if head and mine(head) then
  redis.call('LPOP', KEYS[1])
  return redis.call('LLEN', KEYS[1])
end
for _, it in ipairs(redis.call('LRANGE', KEYS[1], 1, -1)) do
  if mine(it) then
    redis.call('LREM', KEYS[1], 1, it)
    break
  end
end
return redis.call('LLEN', KEYS[1])
