-- tickstep: the decision of one try-lock-tick (locking.DecideTick), made on
-- the server's clock reading (now, now_s), shared by tick.lua (one request)
-- and ticks.lua (a batch in one script). Prepended after lib.lua.
-- lock, counter, mark, pause: the request's keys (lock key, fence counter,
-- tick mark, pause flag), all in one hash slot. tag: the request's token
-- and T as token '@' T (µs; built by the caller), what a lock's value
-- starts with; holder ('' or '|' .. holder), ttl in ms, T, floor ('' for
-- none), max skew and catch-up window in microseconds: decimal strings.
-- resend: whether the request is a resend (locking.TickRequest.Resend);
-- owned: whether it carries its caller's Token (not one drawn for it).
-- Returns verdict, fence, mark, ahead, all integers (microseconds), raise
-- and before: verdict 1 granted, 2 done, 3 contended, 4 paused, 5 missed, 6
-- ahead (T is ahead by 'ahead'), 8 expired (a resend whose grant's lease
-- ended and that cannot be granted again: fence is the grant's), 10 paused
-- and 11 missed answered from the request's verdict record (grant_key; the
-- mark in place, nothing raised); fence is
-- set when granted; mark is the
-- mark after the step (0: none); raise is the mark's decimal to store (nil:
-- unchanged), which the caller hands to step_raise; before is the stored
-- mark the step found (locking.TickAnswer.Before), set only with the
-- verdicts that raise it, decided anew (1, 4, 5; nil otherwise, 0 when the
-- key had no mark); and kept_before, set only with an answer from a
-- record (a resend granted from its own lock or its grant's record, 1;
-- paused or missed from a verdict record, 10, 11): the Before the first
-- attempt's step found, kept in the record (0: none).
-- The values the steps read, kept for the whole script: the lock, mark and
-- counter keys' values (false: no such key), fetched for many requests in
-- one MGET (load), and whether pause flags exist, known for a whole batch
-- from one EXISTS when none does (load_pauses). A step's own writes go into
-- them too, so a key named twice in one script (the same tick asked twice,
-- per-tick locks sharing a mark and counter) is read as the earlier step
-- left it: each step decides exactly as if it ran alone, in order. Reading
-- ahead is exact: nothing else runs while a script does, and Redis does not
-- expire keys while a script runs (its clock stands at the script's start).
local values = {}
local paused_known = {}

-- load reads keys' values into values, in MGETs of up to 1000 keys (unpack
-- is bounded by Lua's C stack).
local function load(keys)
  for i = 1, #keys, 1000 do
    local j = math.min(i + 999, #keys)
    local got = redis.call('MGET', unpack(keys, i, j))
    for n = i, j do
      values[keys[n]] = got[n - i + 1]
    end
  end
end

-- load_pauses learns, when none of keys exists, that none is paused.
local function load_pauses(keys)
  for i = 1, #keys, 1000 do
    if redis.call('EXISTS', unpack(keys, i, math.min(i + 999, #keys))) ~= 0 then
      return -- some exist: each is asked for on its own
    end
  end
  for _, k in ipairs(keys) do
    paused_known[k] = false
  end
end

-- value returns key's value, read now unless known.
local function value(key)
  local v = values[key]
  if v == nil then
    v = redis.call('GET', key)
    values[key] = v
  end
  return v
end

-- set_value writes key's value (a mark, or a fence counter: no expiry). The write is queued
-- and made by flush, in one MSET for all of a script's marks: a script
-- is atomic, so nothing else can read a mark before it is written, and
-- the steps of this script read it from values. SET and MSET both
-- overwrite a key of any type, so the queued write cannot fail where SET
-- would not have.
local marks_written, marks_order = {}, {}

local function set_value(key, v)
  if marks_written[key] == nil then
    marks_order[#marks_order + 1] = key
  end
  marks_written[key] = v
  values[key] = v
end

-- The raised marks to publish, as 'T key' lines by channel (channels in
-- first-use order), sent by flush when the script's steps are
-- done: one PUBLISH per channel carries a whole batch's marks, so a burst
-- costs the server and each listening node a message per batch, not one
-- per tick. Keys hold no control characters: a newline ends a line.
local published, channels = {}, {}

local function queue_publish(channel, line)
  if channel == '' then
    return
  end
  local lines = published[channel]
  if not lines then
    lines = {}
    published[channel] = lines
    channels[#channels + 1] = channel
  end
  lines[#lines + 1] = line
end

-- flush writes the queued marks (set_value), then publishes the raised
-- ones; a script calls it once, after its steps.
local function flush()
  local args = {}
  for _, k in ipairs(marks_order) do
    args[#args + 1] = k
    args[#args + 1] = marks_written[k]
    if #args == 1000 then -- unpack is bounded by Lua's C stack
      redis.call('MSET', unpack(args))
      args = {}
    end
  end
  if #args > 0 then
    redis.call('MSET', unpack(args))
  end
  for _, c in ipairs(channels) do
    redis.call('PUBLISH', c, table.concat(published[c], '\n'))
  end
end

-- is_paused reads the pause flag pause at the server's time now.
local function is_paused(pause, now)
  if paused_known[pause] == false then
    return false
  end
  if redis.call('EXISTS', pause) == 0 then
    return false
  end
  local u = redis.call('HGET', pause, 'until')
  return (not u) or now < tonumber(u)
end

-- A grant's record: the key lock .. ':grant:' .. tag (its lock key's hash
-- slot), holding the fence it drew as its exact decimal, then '/' and the
-- grant's before (the stored mark its step found; 0: none), kept for
-- locking.GrantKeep (twice the TTL: Redis locks last their TTL) from the
-- grant or the last resend that extended it, and deleted by the grant's
-- release (release.lua, releases.lua). A resend that comes after the lock
-- ended finds it: it is the lock's own acquisition continued when nothing
-- came between (locking.DecideLapsedResend).
-- The same key holds, instead of a fence, 'c' or 'd' for a resend (the
-- resend argument) answered contended or done, decided anew: a late copy
-- of an earlier attempt of that request (or another resend) is answered the
-- same for as long, and changes nothing. Its node was told contended and
-- moved on: decided anew once the lock is free, the copy would be granted,
-- T run nowhere and the lock held for nothing. A first attempt writes no
-- such record (every node but one, every tick): without a resend its node
-- never sends it again. It holds 'p' or 'm', followed by the step's before
-- (0: none), for a request carrying its
-- caller's Token (owned; first attempt or resend) answered paused or
-- missed, decided anew: the mark is then at T, and the resend that follows
-- a lost reply would be answered done, its node recording nothing of the
-- tick it consumed. Answered paused or missed from the record instead, the
-- resend raises nothing, and answers the first attempt's before again. The caller reads the key with the others (load).
local function grant_key(lock, tag)
  return lock .. ':grant:' .. tag
end

-- split_grant reads a grant's record rec: the fence's decimal and the
-- grant's before (the stored mark its step found, locking.TickAnswer.Before;
-- 0: none), kept as fence '/' before and answered again to a resend
-- answered from the record. A record of an earlier release (the fence
-- alone) has no before: 0. nil, 0 for no record.
local function split_grant(rec)
  if not rec then
    return nil, 0
  end
  local f, b = string.match(rec, '^(%d+)/(%d+)$')
  if f then
    return f, tonumber(b)
  end
  return rec, 0
end

local function tick_step(lock, counter, mark, pause, tag, holder, ttl, tick_s, floor_s, skew_s, window_s, now, now_s, resend, owned)
  local tick, skew, window = tonumber(tick_s), tonumber(skew_s), tonumber(window_s)
  -- No closure and no table is built per step: a burst runs thousands of
  -- them in one script.

  -- A resent call (its first reply lost) finds its own lock: granted, with
  -- the fence it drew, whatever the mark says now; the lease counts from
  -- now, as the caller believes. Its own: the lock's value starts with the
  -- request's tag, its token and T, so a granted call's token asking for
  -- another T (the schedule's lock is one key for every T) is decided as
  -- any other request. A lock that ended, or another holder's, is not the
  -- resend's: decided as any other request too (done: T is marked).
  local held = value(lock)
  local fence = held and own_fence(held, tag, holder)
  local gk = grant_key(lock, tag)
  local rec = value(gk)
  if fence then
    redis.call('PEXPIRE', lock, ttl)
    redis.call('PEXPIRE', gk, 2 * tonumber(ttl))
    local _, rb = split_grant(rec)
    return 1, fence, tonumber(value(mark) or 0), 0, nil, nil, rb
  end

  -- A resend of this request was answered contended or done, or an attempt
  -- of it paused or missed, decided anew (grant_key): answered the same,
  -- nothing changes; paused and missed with the Before their record kept.
  local kind = rec and string.sub(rec, 1, 1)
  if kind == 'c' then
    return 3, 0, tonumber(value(mark) or 0), 0, nil
  elseif kind == 'd' then
    return 2, 0, tonumber(value(mark) or 0), 0, nil
  elseif kind == 'p' then
    return 10, 0, tonumber(value(mark) or 0), 0, nil, nil, tonumber(string.sub(rec, 2)) or 0
  elseif kind == 'm' then
    return 11, 0, tonumber(value(mark) or 0), 0, nil, nil, tonumber(string.sub(rec, 2)) or 0
  end

  -- A tick too far ahead of the server's clock is refused; nothing changes.
  if tick - now > skew then
    return 6, 0, 0, tick - now, nil
  end

  -- The effective mark: the stored one, or the server's time minus max skew
  -- when missing; raised to the caller's floor, never past the server's clock.
  -- eff_s is its exact decimal (nil: the missing mark's now - skew).
  local stored = value(mark)
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
  -- Done and contended keep the effective mark when the floor raised it. A
  -- missing mark that was only read (as now - skew) stays missing: stored,
  -- it would stop moving with the clock.
  local keep_eff = nil
  if eff_s ~= nil and eff_s ~= stored then
    keep_eff = eff_s
  end

  if tick <= eff then
    -- A resend of a grant whose lock ended (its TTL ran out before the
    -- resend came) finds the grant's record: T is marked, so only a done
    -- request looks (a first attempt pays nothing for it). The lock is
    -- taken again under the grant's fence if it is free, no acquisition of
    -- the key drew a fence since (the counter is still the grant's: a
    -- schedule lock), the key is not paused and the mark is still T (a
    -- schedule lock: no later tick decided); else expired, and nothing
    -- changes. A per-tick lock asks neither counter nor mark: later ticks
    -- of the key are granted while T runs.
    if rec then
      -- A schedule lock's key starts its counter's (prefix{key} and
      -- prefix{key}:fence); a per-tick lock's (prefix{key}:tick:T) does not.
      local per = lock ~= string.sub(counter, 1, #lock)
      local stored_mark = value(mark)
      local rf, rb = split_grant(rec)
      if held or is_paused(pause, now)
          or (not per and (value(counter) ~= rf or not stored_mark or tonumber(stored_mark) ~= tick)) then
        return 8, tonumber(rf), tonumber(stored_mark or 0), 0, keep_eff
      end
      redis.call('SET', lock, tag .. '#' .. rf .. holder, 'PX', ttl)
      values[lock] = tag .. '#' .. rf .. holder
      redis.call('PEXPIRE', gk, 2 * tonumber(ttl))
      return 1, tonumber(rf), tonumber(stored_mark or 0), 0, keep_eff, nil, rb
    end
    if resend then
      redis.call('SET', gk, 'd', 'PX', 2 * tonumber(ttl))
      values[gk] = 'd'
    end
    return 2, 0, eff, 0, keep_eff
  end

  -- The pause flag is read here, inside the step: a pause set before this
  -- call always wins. A paused or missed tick is consumed (the mark moves to
  -- it), so neither a resume nor a late node runs it.
  -- Either verdict is recorded for a request with its caller's Token
  -- (grant_key): its resend after a lost reply is told the same.
  local before = tonumber(stored or 0)
  if is_paused(pause, now) then
    if owned then
      redis.call('SET', gk, 'p' .. (stored or '0'), 'PX', 2 * tonumber(ttl))
      values[gk] = 'p' .. (stored or '0')
    end
    return 4, 0, tick, 0, tick_s, before
  end
  if now - tick > math.max(skew, window) then
    if owned then
      redis.call('SET', gk, 'm' .. (stored or '0'), 'PX', 2 * tonumber(ttl))
      values[gk] = 'm' .. (stored or '0')
    end
    return 5, 0, tick, 0, tick_s, before
  end

  if held then
    if resend then
      redis.call('SET', gk, 'c', 'PX', 2 * tonumber(ttl))
      values[gk] = 'c'
    end
    return 3, 0, eff, 0, keep_eff
  end

  local fence_s
  local c = value(counter)
  if counter_below(c, now) then
    -- grant's usual case, its counter written with the marks (flush, one
    -- MSET for the whole script): a redis.call less per granted tick, a
    -- third of what a grant costs the server in a burst. Written so, the
    -- counter has no expiry: a schedule's counter lives as long as its
    -- mark, which never expires either.
    fence, fence_s = now, now_s
    redis.call('SET', lock, tag .. '#' .. fence_s .. holder, 'PX', ttl)
    set_value(counter, now_s)
  else
    if marks_written[counter] ~= nil then
      -- INCR must read the value queued for this counter by an earlier
      -- step of this script (per-tick locks of one schedule).
      redis.call('SET', counter, marks_written[counter])
    end
    fence, fence_s = grant(lock, counter, c, tag, holder, ttl, now, now_s)
    values[counter] = fence_s
    if marks_written[counter] ~= nil then
      marks_written[counter] = fence_s
    end
  end
  values[lock] = tag .. '#' .. fence_s .. holder
  local g = fence_s .. '/' .. (stored or '0')
  redis.call('SET', gk, g, 'PX', 2 * tonumber(ttl))
  values[gk] = g
  return 1, fence, tick, 0, tick_s, before
end

-- step_raise does what a step decided for its mark, once the step
-- returned: it stores raise (the mark's new decimal; nil: unchanged) and,
-- for a tick granted, paused or missed, queues the 'T key' line telling
-- it (locking.TickWatcher: a node waiting for its turn drops T without
-- asking). Done here, not in the step: a step that fails after deciding
-- (ticks.lua catches it and answers its request with an error) must raise
-- no mark, which would consume a tick nobody was told it may run, and tell
-- no node to drop it.
local function step_raise(mark, v, raise, channel, tick_s, key)
  if raise then
    set_value(mark, raise)
    if v == 1 or v == 4 or v == 5 then
      queue_publish(channel, tick_s .. ' ' .. key)
    end
  end
end
