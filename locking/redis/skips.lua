-- skips: add skips to a schedule's skip records and trim them to the
-- newest keep ticks, in one step, so no reader ever sees them longer.
-- KEYS[1] the skip records, a sorted set of skip JSON scored by tick in µs
-- (one member per tick).
-- ARGV[1] keep; ARGV[2..] per skip: score (its tick), member.
-- One record per tick, the first kept: a skip whose tick is already there
-- (recorded by another node that saw the same decision, by a resent
-- batch, or earlier in this batch) is dropped. The member holds the node,
-- reason, note and time of the decision, so a second record of a tick is
-- a different member: ZADD alone would keep both; ZCOUNT score score
-- finds the tick in O(log n).
-- Returns the number of records after the step.
local k = KEYS[1]
for i = 2, #ARGV, 2 do
  local score = ARGV[i]
  if redis.call('ZCOUNT', k, score, score) == 0 then
    redis.call('ZADD', k, score, ARGV[i + 1])
  end
end
redis.call('ZREMRANGEBYRANK', k, 0, -tonumber(ARGV[1]) - 1)
return redis.call('ZCARD', k)
