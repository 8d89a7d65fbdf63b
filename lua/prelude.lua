-- Sluice prelude: shared by every script. Written for Redis 7.0's Lua 5.1.
--
-- Numbers are doubles. Every value here is an integer below 2^53 (engine's
-- validation keeps them there), where doubles are exact, and integer
-- division is floor(a / b), exact for 0 <= a < 2^53 and b >= 1. Never turn a
-- number into a string with tostring or '..': Lua 5.1 prints "%.14g" and
-- would round a time in microseconds. num() prints it exactly.
local floor, ceil, max = math.floor, math.ceil, math.max

local function num(n)
  return string.format('%.0f', n)
end

-- fail raises an error that Redis replies with as is, and that the batch
-- script's pcall catches as a table, like the errors redis.call raises.
local function fail(msg)
  error({err = 'ERR sluice: ' .. msg}, 0)
end

-- int reads a stored integer: absent (false or nil) is 0.
local function int(v, key)
  if not v then
    return 0
  end
  local n = tonumber(v)
  if not n then
    fail('key ' .. key .. ' holds ' .. string.format('%q', v) .. ', not a number')
  end
  return n
end

-- pinned is true when the caller pinned the clock (tests only). Redis
-- expires keys on its own clock, which a pinned clock does not move, so the
-- scripts then do Redis's expiry themselves on the pinned clock: every TTL
-- gets slack, so that Redis never drops state the pinned clock still counts,
-- and a key found past its state's end is deleted when touched, as Redis
-- deletes an expired key on access (see expired).
local pinned = false
local slack = 3600000 -- ms

-- ttl is the PEXPIRE argument for state that stops mattering in rem µs:
-- rem rounded up to whole milliseconds, at least 1.
local function ttl(rem)
  local ms = max(ceil(rem / 1000), 1)
  if pinned then
    ms = ms + slack
  end
  return num(ms)
end

-- clock is now in µs since the epoch: the pinned time when one is given,
-- otherwise Redis's own clock, so that every sidecar agrees on the time.
local function clock(arg)
  if arg ~= nil and arg ~= '' then
    local n = tonumber(arg)
    if not n or n ~= floor(n) then
      fail('invalid pinned now ' .. string.format('%q', arg))
    end
    pinned = true
    return n
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- expired reports whether a key's state, which ends at the given time
-- (µs), is over at now on a pinned clock, and then deletes the key, as Redis
-- would have expired it on its own clock. On Redis's clock the key's TTL
-- does this and expired is always false.
local function expired(key, now, ends)
  if pinned and now >= ends then
    redis.call('DEL', key)
    return true
  end
  return false
end

-- param reads a non-negative integer argument.
local function param(v, name)
  local n = tonumber(v)
  if not n or n < 0 or n ~= floor(n) or n >= 9007199254740992 then
    fail('invalid ' .. name .. ' ' .. string.format('%q', tostring(v)) .. ': want an integer in [0, 2^53)')
  end
  return n
end

-- decode reads one request's five parameters from ARGV starting at i:
-- rate, period (µs), burst, cost, peek (1 or 0).
local function decode(i)
  local rate, period = param(ARGV[i], 'rate'), param(ARGV[i + 1], 'period')
  if rate < 1 or period < 1 then
    fail('rate and period must be at least 1')
  end
  return rate, period, param(ARGV[i + 2], 'burst'), param(ARGV[i + 3], 'cost'), ARGV[i + 4] == '1'
end

-- interval is the µs one unit takes to refill or drain.
local function interval(rate, period)
  local t = floor(period / rate)
  if t < 1 then
    fail('rate is more than one per microsecond')
  end
  return t
end
