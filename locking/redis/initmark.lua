-- initmark: create a key's tick mark at the server's time if it has none.
-- KEYS[1] mark key. Returns 1 when created, 0 when a mark existed.
local t = redis.call('TIME')
local us = t[2]
if redis.call('SET', KEYS[1], t[1] .. string.rep('0', 6 - #us) .. us, 'NX') then
  return 1
end
return 0
