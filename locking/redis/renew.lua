-- renew: extend the lock only if it is still ours.
-- KEYS[1] lock key; ARGV[1] value stored at acquire, ARGV[2] ttl in ms.
-- Returns 1 when extended, 0 when the lock is gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
