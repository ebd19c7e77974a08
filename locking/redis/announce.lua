-- announce: record a node as live, on the server's clock.
-- KEYS[1] the nodes hash (node id -> last seen µs '|' ttl µs '|' JSON);
-- ARGV[1] node id, ARGV[2] ttl in µs, ARGV[3] the node as JSON.
-- Returns the server's time in µs (the node's last seen).
local t = redis.call('TIME')
local us = t[2]
local now_s = t[1] .. string.rep('0', 6 - #us) .. us
redis.call('HSET', KEYS[1], ARGV[1], now_s .. '|' .. ARGV[2] .. '|' .. ARGV[3])
-- The hash outlives its longest-lived node, and no more: once every node
-- has stopped announcing, it goes away by itself.
local ms = math.ceil(tonumber(ARGV[2]) / 1000)
local left = redis.call('PTTL', KEYS[1])
if left < ms then -- -1: no expiry yet
  redis.call('PEXPIRE', KEYS[1], ms)
end
return tonumber(now_s)
