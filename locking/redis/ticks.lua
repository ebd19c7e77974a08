-- ticks: many try-lock-ticks in one script, on one server (never on a
-- Cluster, whose keys of different schedules lie in different slots): the
-- same decision as tick.lua for each request, in order, all at one reading
-- of the server's clock. One script instead of one per request saves the
-- server the cost of a command and a script call per tick, which is most
-- of what a tick costs it in a burst.
--
-- What a batch's requests share is sent once: the holder, the channel, the
-- key prefix, and each run of requests with the same ttl, T, floor, max
-- skew, window and kind of lock (a burst's requests are one run); each
-- request then costs two arguments, its key and its token, and its four
-- keys are built here as Locker.lockKey builds them (prefix{key} and its
-- suffixes). That is why no KEYS are declared: a Cluster, which requires
-- them, never runs this script.
-- ARGV[1] '' or '|' .. holder; ARGV[2] the channel raised marks are
-- published on ('' for none); ARGV[3] the key prefix; then runs, each:
-- n, ttl in ms, T, floor ('' for none), max skew, window (µs, decimal
-- strings as tick.lua's), flags ('1' in it: the tick's lock, prefix{key}
-- :tick:T, else the schedule's; 'r' in it: resends,
-- locking.TickRequest.Resend; 't' in it: requests carrying their caller's
-- Token), followed by n pairs key, tag (the
-- request's token '@' T, as tick.lua's).
-- Returns now, then 3 integers per request: verdict, fence (for verdict
-- 6, ahead), mark; verdict 7: that request's step failed. As tick.lua's,
-- mark carries the step's before when it gave one, and a grant that gave
-- none is verdict 9; 10 and 11 (paused, missed from a record) carry the
-- mark. After every request's 3 integers, one more for each request
-- answered 9, 10 or 11, in the requests' order: the before its record kept
-- (tick_step's kept_before; 0: none). A batch of first attempts has none:
-- its reply is as long as it was.
local now, now_s = clock()
local holder, channel, prefix = ARGV[1], ARGV[2], ARGV[3]

-- The requests' keys: lock, counter, mark, pause and grant record
-- (tickstep.lua's grant_key), 5 per request.
local ks = {}
local i = 4
while i <= #ARGV do
  local n, tick_s, per = tonumber(ARGV[i]), ARGV[i + 2], string.find(ARGV[i + 6], '1', 1, true) ~= nil
  for a = i + 7, i + 5 + 2 * n, 2 do
    local base = prefix .. '{' .. ARGV[a] .. '}'
    local m = #ks
    if per then
      ks[m + 1] = base .. ':tick:' .. tick_s
    else
      ks[m + 1] = base
    end
    ks[m + 2] = base .. ':fence'
    ks[m + 3] = base .. ':mark'
    ks[m + 4] = base .. ':pause'
    ks[m + 5] = grant_key(ks[m + 1], ARGV[a + 1])
  end
  i = i + 7 + 2 * n
end

-- Every request's lock, counter and mark in one read, and its pause flag
-- in one more (tickstep.lua's values).
local reads, pauses = {}, {}
for k = 1, #ks, 5 do
  reads[#reads + 1] = ks[k]
  reads[#reads + 1] = ks[k + 1]
  reads[#reads + 1] = ks[k + 2]
  reads[#reads + 1] = ks[k + 4]
  pauses[#pauses + 1] = ks[k + 3]
end
load(reads)
load_pauses(pauses)

local out, kept = {now}, {}
local o, k = 1, 0
i = 4
while i <= #ARGV do
  local n, ttl, tick_s, floor_s, skew_s, window_s = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local resend = string.find(ARGV[i + 6], 'r', 1, true) ~= nil
  local owned = string.find(ARGV[i + 6], 't', 1, true) ~= nil
  for a = i + 7, i + 5 + 2 * n, 2 do
    -- A script is not rolled back: an error in one request (a key of
    -- another type) must not abort the script after the requests before
    -- it raised their marks and took their locks. It fails that request
    -- alone (7).
    -- The step's mark is stored and told only once it returned: a failed
    -- step raises no mark and publishes nothing (step_raise).
    local ok, v, fence, mark, ahead, raise, before, kept_before = pcall(tick_step, ks[k + 1], ks[k + 2], ks[k + 3], ks[k + 4],
      ARGV[a + 1], holder, ttl, tick_s, floor_s, skew_s, window_s, now, now_s, resend, owned)
    if not ok then
      v, fence, mark = 7, 0, 0
    else
      step_raise(ks[k + 3], v, raise, channel, tick_s, ARGV[a])
      if v == 6 then
        fence = ahead
      elseif before then
        mark = before
      elseif v == 1 then
        v = 9
      end
    end
    if v == 9 or v == 10 or v == 11 then
      kept[#kept + 1] = kept_before or 0
    end
    out[o + 1], out[o + 2], out[o + 3] = v, fence, mark
    o, k = o + 3, k + 5
  end
  i = i + 7 + 2 * n
end
flush()
for _, b in ipairs(kept) do
  out[#out + 1] = b
end
return out
