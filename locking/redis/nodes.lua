-- nodes: the live nodes, on the server's clock; expired ones are deleted.
-- KEYS[1] the nodes hash (see announce.lua).
-- Returns {last seen µs, JSON, ...} for each live node.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local seen, ttl, node = string.match(all[i + 1], '^(%d+)|(%d+)|(.*)$')
  if seen and tonumber(seen) + tonumber(ttl) > now then
    out[#out + 1] = tonumber(seen)
    out[#out + 1] = node
  else
    redis.call('HDEL', KEYS[1], all[i])
  end
end
return out
