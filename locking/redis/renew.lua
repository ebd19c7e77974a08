-- renew: extend the lock only if it is still ours.
-- KEYS[1] lock key; ARGV[1] value stored at acquire, ARGV[2] ttl in ms.
-- Returns 1 when extended, 0 when the lock is gone or someone else's.
-- A renewal of a take's lock is its taker's word that it heard the take:
-- its trigger is no longer pending (take.lua), never to be requeued.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local tag = string.match(ARGV[1], '^([^#]*)#')
  if tag and not string.find(tag, '@', 1, true) then
    redis.call('HDEL', KEYS[1] .. ':pending', tag)
  end
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
