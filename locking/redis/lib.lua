-- lib: functions shared by acquire.lua and tick.lua (prepended to each).
--
-- Numbers: microsecond times and fences (about 1.8e15) are exact in Lua's
-- doubles (below 2^53) and compared as numbers, but Lua formats such a
-- number as 1.7960416032329e+15, so no string is ever built from one. What
-- is written to Redis is either a string the caller passed, one built from
-- TIME's own strings, or made by Redis itself (INCR, DECRBY); values sent
-- back are integers, which Redis converts exactly.
--
-- A lock's stored value is tag .. '#' .. fence .. holder, where holder is
-- '' or '|' followed by the holder's name, and tag the token (TryLock) or,
-- for a try-lock-tick, the token and T as token '@' T: the fence it drew is
-- kept with the lock, so a resent call is answered with its own fence even
-- when other locks of the key (per-tick locks) drew later ones since, and
-- a resend is recognised by token and T.

-- clock returns the server's time in microseconds, as a number and as its
-- exact decimal string.
local function clock()
  local t = redis.call('TIME')
  local us = t[2]
  return tonumber(t[1]) * 1000000 + tonumber(us), t[1] .. string.rep('0', 6 - #us) .. us
end

-- own_fence returns the fence of a lock whose stored value is v if v is
-- this tag and holder's (the call is a resend of one whose reply was
-- lost), else nil.
local function own_fence(v, tag, holder)
  local p = tag .. '#'
  if string.sub(v, 1, #p) ~= p then
    return nil
  end
  local f, rest = string.match(string.sub(v, #p + 1), '^(%d+)(.*)$')
  if f == nil or rest ~= holder then
    return nil
  end
  return tonumber(f)
end

-- counter_below says whether a fence counter whose value is c (false: no
-- counter; nil: not read) is missing or below the clock now, so that the
-- next fence is the clock itself (grant's usual case). A value that is not
-- an integer as INCR reads one (digits, no leading zero) is not: it takes
-- grant's general path, where INCR refuses it. One at or above 2^53,
-- inexact in Lua, is far above the clock: the general path too.
local function counter_below(c, now)
  if c == false then
    return true
  end
  if c == nil or (c ~= '0' and not string.match(c, '^[1-9]%d*$')) then
    return false
  end
  return tonumber(c) + 1 < now
end

-- grant takes lock for ttl ms and draws its fence: one above the counter and
-- at least the server's clock, so a counter Redis lost or rewound (no
-- persistence, an AOF everysec crash, a lagging replica promoted, a switch
-- to another backend and back) never hands out a fence already given.
-- counter_v is the counter's value as the caller read it in this script
-- (false: no counter), or nil when it did not read it. Returns the fence
-- and its exact decimal, which is now the counter's value.
local function grant(lock, counter, counter_v, token, holder, ttl, now, now_s)
  local fence, fence_s
  -- The counter may go once its key is unused for 30 days: the next fence
  -- is then floored at the clock, above every one drawn before, so keys of
  -- `lock run` calls made once do not stay forever. (Tick marks never
  -- expire: a forgotten mark is safe but loses a catch-up.)
  local keep = 2592000000
  -- The usual case, a counter missing or below the clock (the last fence
  -- was drawn more than a microsecond ago): the fence is the clock, in one
  -- write (counter_below).
  if counter_below(counter_v, now) then
    redis.call('SET', counter, now_s, 'PX', keep)
    fence, fence_s = now, now_s
  else
    fence = redis.call('INCR', counter)
    fence_s = now_s
    if fence < now then
      redis.call('SET', counter, now_s)
      fence = now
    else
      fence_s = redis.call('GET', counter) -- the counter's own decimal: exact
    end
    redis.call('PEXPIRE', counter, keep)
  end
  redis.call('SET', lock, token .. '#' .. fence_s .. holder, 'PX', ttl)
  return fence, fence_s
end
