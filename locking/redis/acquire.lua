-- acquire: take the lock and draw its fencing token in one atomic step.
-- KEYS[1] lock key, KEYS[2] fence key (same hash slot); ARGV[1] value, ARGV[2] ttl in ms.
-- Returns the new fence (>= 1) when taken, 0 when someone else holds the lock.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.call('INCR', KEYS[2])
  if fence == 1 then
    -- A new counter: the key was never locked, or Redis lost its data. Seed
    -- it from the server's clock in microseconds, so a counter that restarts
    -- after data loss still hands out fences above every one drawn before
    -- (a key would need over a million acquisitions a second to outrun it),
    -- and stale holders' writes stay refusable.
    local t = redis.call('TIME')
    fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[2], fence)
  end
  return fence
end
-- The client may resend this script after a lost reply (a retried EVALSHA).
-- Finding our own value means the first run took the lock: answer with the
-- fence it drew (nobody else can have drawn one since), not with "held".
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local fence = tonumber(redis.call('GET', KEYS[2]))
  if fence then
    return fence
  end
end
return 0
