-- release: delete the lock only if it is still ours.
-- KEYS[1] lock key; ARGV[1] value stored at acquire; ARGV[2] 'closing' for
-- Close's release (optional).
-- Returns 1 when deleted, 0 when the lock is gone or someone else's.
-- A try-lock-tick's lock (its value's tag is token '@' T) has its grant's
-- record deleted too, whether or not the lock was still ours: released, the
-- grant is over (its holder ran T or gave it up), and a late resend of its
-- request is decided as a new one (tickstep.lua's grant_key).
local tag = string.match(ARGV[1], '^([^#]*)#')
if tag and string.find(tag, '@', 1, true) then
  redis.call('DEL', KEYS[1] .. ':grant:' .. tag)
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  -- A take's lock released while ours: its taker heard the take, and ran
  -- its trigger or gave it up; it is no longer pending (take.lua). One
  -- that lapsed first stays pending: its taker never started it; so does
  -- one released by Close (ARGV[2] 'closing'), which is no word from the
  -- taker.
  if tag and not string.find(tag, '@', 1, true) and ARGV[2] ~= 'closing' then
    redis.call('HDEL', KEYS[1] .. ':pending', tag)
  end
  return redis.call('DEL', KEYS[1])
end
return 0
