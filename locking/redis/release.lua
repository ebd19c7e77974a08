-- release: delete the lock only if it is still ours.
-- KEYS[1] lock key; ARGV[1] value stored at acquire.
-- Returns 1 when deleted, 0 when the lock is gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
