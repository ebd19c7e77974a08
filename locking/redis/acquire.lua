-- acquire: take the lock and draw its fencing token in one atomic step.
-- KEYS[1] lock key, KEYS[2] fence key (same hash slot); ARGV[1] token,
-- ARGV[2] '' or '|' .. holder, ARGV[3] ttl in ms.
-- Returns the fence (>= 1) when taken, 0 when someone else holds the lock.

-- One read for both keys: the counter's value spares grant a call.
local read = redis.call('MGET', KEYS[1], KEYS[2])
local v = read[1]
if v then
  -- The client may resend this script after a lost reply (a retried
  -- EVALSHA). Finding our own value means the first run took the lock:
  -- answer with the fence it drew, not with "held"; the lease counts from
  -- now, as the caller believes.
  local fence = own_fence(v, ARGV[1], ARGV[2])
  if fence then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return fence
  end
  return 0
end
local now, now_s = clock()
return (grant(KEYS[1], KEYS[2], read[2], ARGV[1], ARGV[2], ARGV[3], now, now_s))
