-- tick: try-lock-tick, the decision of locking.DecideTick made atomically on
-- the server's clock (TIME); tickstep.lua holds the decision.
-- KEYS[1] lock key (the schedule's, or the tick's), KEYS[2] fence counter,
-- KEYS[3] tick mark, KEYS[4] pause flag; all in one hash slot.
-- ARGV[1] tag (token '@' T), ARGV[2] '' or '|' .. holder, ARGV[3] ttl in ms,
-- ARGV[4] T, ARGV[5] floor ('' for none), ARGV[6] max skew, ARGV[7]
-- catch-up window; times and durations in microseconds, as decimal strings;
-- ARGV[8] the channel raised marks are published on ('' for none), ARGV[9]
-- the caller's key, published as 'T key' (T as given in ARGV[4]); ARGV[10]
-- flags: 'r' in it for a resend (locking.TickRequest.Resend), 't' in it
-- when the request carries its caller's Token.
-- Returns {verdict, fence, mark, now, ahead} (tick_step's, and now), where
-- mark carries tick_step's before instead when the step gave one (verdicts
-- 1, 4, 5 decided anew: their mark is T, which the caller knows; 0 for no
-- mark before), and a grant that gave none (a resend's) is verdict 9, its
-- mark in place: the reply stays five integers, none larger than it was.
-- Verdicts 10 and 11 (paused, missed from the request's record) carry the
-- mark in place too. Verdicts 9, 10 and 11, answered from a record, carry
-- the before the record kept (tick_step's kept_before; 0: none) in
-- ahead's place, which is 0 with every verdict but 6.
local now, now_s = clock()
load({KEYS[1], KEYS[2], KEYS[3], grant_key(KEYS[1], ARGV[1])})
local v, fence, mark, ahead, raise, before, kept_before = tick_step(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], now, now_s,
  string.find(ARGV[10], 'r', 1, true) ~= nil, string.find(ARGV[10], 't', 1, true) ~= nil)
step_raise(KEYS[3], v, raise, ARGV[8], ARGV[4], ARGV[9])
flush()
if before then
  mark = before
else
  if v == 1 then
    v = 9
  end
  if kept_before then
    ahead = kept_before
  end
end
return {v, fence, mark, now, ahead}
