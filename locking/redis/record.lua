-- record: add runs to a schedule's history and trim it to its newest keep,
-- in one step, so no reader ever sees it longer.
-- KEYS[1] the history, a sorted set of run JSON scored by StartedAt in µs;
-- ARGV[1] keep; ARGV[2..] score, member pairs.
-- Returns the history's length after the step.
-- ZADD in chunks of 100 pairs: unpack puts its values on Lua's C stack,
-- which is bounded.
for i = 2, #ARGV, 200 do
  redis.call('ZADD', KEYS[1], unpack(ARGV, i, math.min(i + 199, #ARGV)))
end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -tonumber(ARGV[1]) - 1)
return redis.call('ZCARD', KEYS[1])
