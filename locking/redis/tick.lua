-- tick: try-lock-tick, the decision of locking.DecideTick made atomically on
-- the server's clock (TIME).
-- KEYS[1] lock key (the schedule's, or the tick's), KEYS[2] fence counter,
-- KEYS[3] tick mark, KEYS[4] pause flag; all in one hash slot.
-- ARGV[1] token, ARGV[2] '' or '|' .. holder, ARGV[3] ttl in ms,
-- ARGV[4] T, ARGV[5] floor ('' for none), ARGV[6] max skew, ARGV[7]
-- catch-up window; times and durations in microseconds, as decimal strings;
-- ARGV[8] the channel raised marks are published on ('' for none), ARGV[9]
-- the caller's key, published as 'T key' (T as given in ARGV[4]).
-- Returns {verdict, fence, mark, now, ahead}, all integers (microseconds):
-- verdict 1 granted, 2 done, 3 contended, 4 paused, 5 missed, 6 ahead (T
-- is ahead by 'ahead'); fence is set when granted; mark is the mark after
-- the step.
local token, holder, ttl = ARGV[1], ARGV[2], ARGV[3]
local tick_s, floor_s = ARGV[4], ARGV[5]
local tick, skew, window = tonumber(tick_s), tonumber(ARGV[6]), tonumber(ARGV[7])
local now, now_s = clock()

-- publish tells the cluster's nodes that the mark was raised to T
-- (locking.TickWatcher): a node waiting for its turn drops T without asking.
local function publish()
  if ARGV[8] ~= '' then
    redis.call('PUBLISH', ARGV[8], tick_s .. ' ' .. ARGV[9])
  end
end

local function mark_now()
  return tonumber(redis.call('GET', KEYS[3]) or 0)
end

-- A resent call (its first reply lost) finds its own lock: granted, with the
-- fence it drew, whatever the mark says now; the lease counts from now, as
-- the caller believes.
local held = redis.call('GET', KEYS[1])
local fence = held and own_fence(held, token, holder)
if fence then
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, fence, mark_now(), now, 0}
end

-- A tick too far ahead of the server's clock is refused; nothing changes.
if tick - now > skew then
  return {6, 0, 0, now, tick - now}
end

-- The effective mark: the stored one, or the server's time minus max skew
-- when missing; raised to the caller's floor, never past the server's clock.
-- eff_s is its exact decimal (nil: the missing mark's now - skew).
local stored = redis.call('GET', KEYS[3])
local eff, eff_s
if stored then
  eff, eff_s = tonumber(stored), stored
else
  eff = now - skew
end
if floor_s ~= '' then
  local fl, fl_s = tonumber(floor_s), floor_s
  if fl > now then
    fl, fl_s = now, now_s
  end
  if fl > eff then
    eff, eff_s = fl, fl_s
  end
end

-- keep_mark stores the effective mark when the floor raised it. A missing
-- mark that was only read (as now - skew) stays missing: stored, it would
-- stop moving with the clock.
local function keep_mark()
  if eff_s ~= nil and eff_s ~= stored then
    redis.call('SET', KEYS[3], eff_s)
  end
end

if tick <= eff then
  keep_mark()
  return {2, 0, eff, now, 0}
end

-- The pause flag is read here, inside the step: a pause set before this
-- call always wins. A paused or missed tick is consumed (the mark moves to
-- it), so neither a resume nor a late node runs it.
local paused = false
if redis.call('EXISTS', KEYS[4]) == 1 then
  local u = redis.call('HGET', KEYS[4], 'until')
  paused = (not u) or now < tonumber(u)
end
if paused then
  redis.call('SET', KEYS[3], tick_s)
  publish()
  return {4, 0, tick, now, 0}
end
if now - tick > math.max(skew, window) then
  redis.call('SET', KEYS[3], tick_s)
  publish()
  return {5, 0, tick, now, 0}
end

if held then
  keep_mark()
  return {3, 0, eff, now, 0}
end

redis.call('SET', KEYS[3], tick_s)
publish()
fence = grant(KEYS[1], KEYS[2], token, holder, ttl, now, now_s)
return {1, fence, tick, now, 0}
