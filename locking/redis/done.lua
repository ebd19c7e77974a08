-- done: remove a finished backfill tick from the head of its queue.
-- KEYS[1] the request queue; ARGV[1] the request's id.
-- Returns the queue's length after the step. A head that is not that
-- backfill request (already removed, or never a backfill) is left alone.
local head = redis.call('LINDEX', KEYS[1], 0)
if head then
  local req = cjson.decode(head)
  if req.backfill == true and req.id == ARGV[1] then
    redis.call('LPOP', KEYS[1])
  end
end
return redis.call('LLEN', KEYS[1])
