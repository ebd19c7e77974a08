-- releases: release.lua for many locks in one script, on one server (never
-- on a Cluster, whose locks lie in different slots): each lock is deleted
-- only if it is still ours, as release.lua decides it alone. One MGET reads
-- them all and one DEL deletes the ones that are ours.
-- KEYS[i] lock key; ARGV[i] the value stored at its acquire.
-- Returns, for each i, 1 when deleted, 0 when the lock is gone or someone
-- else's.
local out, dels, gone = {}, {}, {}
for i = 1, #KEYS, 1000 do
  local j = math.min(i + 999, #KEYS)
  local vs = redis.call('MGET', unpack(KEYS, i, j))
  for n = i, j do
    local k = KEYS[n]
    -- A key named twice is deleted once: the second finds it gone, as a
    -- second release would.
    -- A try-lock-tick's grant record goes with its release, as in
    -- release.lua.
    local tag = string.match(ARGV[n], '^([^#]*)#')
    if tag and string.find(tag, '@', 1, true) then
      dels[#dels + 1] = k .. ':grant:' .. tag
    end
    if not gone[k] and vs[n - i + 1] == ARGV[n] then
      gone[k] = true
      dels[#dels + 1] = k
      out[n] = 1
      -- A take's lock released while ours: no longer pending, as in
      -- release.lua.
      if tag and not string.find(tag, '@', 1, true) then
        redis.call('HDEL', k .. ':pending', tag)
      end
    else
      out[n] = 0
    end
  end
end
for i = 1, #dels, 1000 do
  redis.call('DEL', unpack(dels, i, math.min(i + 999, #dels)))
end
return out
