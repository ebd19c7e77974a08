-- done: remove a finished backfill tick from its queue, wherever it is:
-- a trigger put back at the head while it ran (a give-back, an unheard
-- take's requeue) must not keep it queued, to run again.
-- KEYS[1] the request queue; ARGV[1] the request's id.
-- Returns the queue's length after the step. A queue without that
-- backfill request (already removed, or never a backfill) is left alone.
local items = redis.call('LRANGE', KEYS[1], 0, -1)
for _, it in ipairs(items) do
  local req = cjson.decode(it)
  if req.backfill == true and req.id == ARGV[1] then
    redis.call('LREM', KEYS[1], 1, it)
    break
  end
end
return redis.call('LLEN', KEYS[1])
