-- ticks: many try-lock-ticks in one script, on one server (never on a
-- Cluster, whose keys of different schedules lie in different slots): the
-- same decision as tick.lua for each request, in order, all at one reading
-- of the server's clock. One script instead of one per request saves the
-- server the cost of a command and a script call per tick, which is most
-- of what a tick costs it in a burst.
-- KEYS[4i-3 .. 4i]: request i's keys, as tick.lua's KEYS.
-- ARGV[1] '' or '|' .. holder (the same for every request); ARGV[2+8(i-1)
-- .. 9+8(i-1)]: request i's token, ttl in ms, T, floor, max skew, window,
-- channel and key (tick.lua's ARGV[8] and ARGV[9]).
-- Returns the concatenation of every request's 5 integers (verdict 7: that
-- request's step failed).
local now, now_s = clock()
local holder = ARGV[1]
-- Every request's lock, counter and mark in one read, and its pause flag
-- in one more (tickstep.lua's values).
local reads, pauses = {}, {}
for i = 1, #KEYS, 4 do
  reads[#reads + 1] = KEYS[i]
  reads[#reads + 1] = KEYS[i + 1]
  reads[#reads + 1] = KEYS[i + 2]
  pauses[#pauses + 1] = KEYS[i + 3]
end
load(reads)
load_pauses(pauses)
local out = {}
for i = 1, #KEYS / 4 do
  local k, a = 4 * (i - 1), 1 + 8 * (i - 1)
  -- A script is not rolled back: an error in one request (a key of another
  -- type) must not abort the script after the requests before it raised
  -- their marks and took their locks. It fails that request alone (7).
  local ok, r = pcall(tick_step, KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4],
    ARGV[a + 1], holder, ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], now, now_s)
  if not ok then
    r = {7, 0, 0, now, 0}
  end
  for j = 1, 5 do
    out[#out + 1] = r[j]
  end
end
flush_published()
return out
