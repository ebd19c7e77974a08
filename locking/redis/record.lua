-- record: add runs to a schedule's history and trim it to its newest keep,
-- in one step, so no reader ever sees it longer.
-- KEYS[1] the history, a sorted set of run JSON scored by StartedAt in µs;
-- KEYS[2] the history's runs recorded unstarted (Attempts 0: a manual run
-- given back before it started), a hash run id -> member.
-- ARGV[1] keep; ARGV[2..] per run: score, member, run id, '1' if started
-- (Attempts > 0), 'r' if the provisional record of a run that started
-- (Attempts 0, Result running), else '0' (unstarted).
-- One record per run id for an unstarted run: the real run of that id
-- replaces it, and an unstarted record of a run already recorded (in the
-- history or in this batch) is not stored. A provisional record is written
-- by every run as it starts, so it must be cheap: its final record has its
-- StartedAt, its score, so it looks only among the members of that score
-- (ZRANGEBYSCORE score score: O(log n) plus the runs that started that
-- µs, usually none). Any other unstarted record (a manual run given back
-- before it started, recorded under its request's id with a StartedAt of
-- its own) searches the whole history, decoding every member: they are
-- rare.
-- Returns the history's length after the step.
local h, u = KEYS[1], KEYS[2]
local hasU = redis.call('EXISTS', u) == 1
local started = {}
for i = 2, #ARGV, 4 do
  if ARGV[i + 3] == '1' then
    started[ARGV[i + 2]] = true
  end
end
-- recorded: whether the history holds a run with this id (a member is
-- the run's JSON, a newline, then its output): among the members scored
-- score when given, else among all.
local function recorded(id, score)
  local ms
  if score then
    ms = redis.call('ZRANGEBYSCORE', h, score, score)
  else
    ms = redis.call('ZRANGE', h, 0, -1)
  end
  for _, m in ipairs(ms) do
    local nl = string.find(m, '\n', 1, true)
    local ok, r = pcall(cjson.decode, string.sub(m, 1, (nl or (#m + 1)) - 1))
    if ok and type(r) == 'table' and r['run_id'] == id then
      return true
    end
  end
  return false
end
local pairs_ = {}
for i = 2, #ARGV, 4 do
  local score, member, id = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if ARGV[i + 3] == '1' then
    if hasU then
      local old = redis.call('HGET', u, id)
      if old then
        redis.call('ZREM', h, old)
        redis.call('HDEL', u, id)
      end
    end
    pairs_[#pairs_ + 1] = score
    pairs_[#pairs_ + 1] = member
  elseif not started[id] and redis.call('HEXISTS', u, id) == 0
      and not recorded(id, ARGV[i + 3] == 'r' and score or nil) then
    redis.call('HSET', u, id, member)
    hasU = true
    pairs_[#pairs_ + 1] = score
    pairs_[#pairs_ + 1] = member
  end
end
-- ZADD in chunks of 100 pairs: unpack puts its values on Lua's C stack,
-- which is bounded.
for i = 1, #pairs_, 200 do
  redis.call('ZADD', h, unpack(pairs_, i, math.min(i + 199, #pairs_)))
end
local keep = tonumber(ARGV[1])
redis.call('ZREMRANGEBYRANK', h, 0, -keep - 1)
-- The unstarted runs trimmed from the history leave their entries in u:
-- once u holds more than the history can, drop those.
if hasU and redis.call('HLEN', u) > keep then
  local all = redis.call('HGETALL', u)
  for i = 1, #all, 2 do
    if not redis.call('ZSCORE', h, all[i + 1]) then
      redis.call('HDEL', u, all[i])
    end
  end
end
return redis.call('ZCARD', h)
