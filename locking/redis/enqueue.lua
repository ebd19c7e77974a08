-- enqueue: append requests to a schedule's queue, refusing a backfill while
-- one is queued.
-- KEYS[1] the request queue; ARGV[1] '1' when the requests hold a backfill,
-- else '0'; ARGV[2..] the requests as JSON, oldest first.
-- Returns the queue's length, or -1 (nothing appended) when a backfill is
-- already queued.
if ARGV[1] == '1' then
  for _, v in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
    if cjson.decode(v).backfill == true then
      return -1
    end
  end
end
-- RPUSH in chunks: unpack puts its values on Lua's C stack, which is bounded.
local n = 0
for i = 2, #ARGV, 100 do
  n = redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 99, #ARGV)))
end
return n
