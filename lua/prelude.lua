-- Sluice prelude: shared by every script. Written for Redis 7.0's Lua 5.1.
--
-- Numbers are doubles. Every value here is an integer below 2^53 (engine's
-- validation keeps them there), where doubles are exact, and integer
-- division is floor(a / b), exact for 0 <= a < 2^53 and b >= 1. State is
-- stored by passing numbers to redis.call as numbers: Redis prints them
-- exactly (7.0 with "%.17g", later versions in the shortest form that reads
-- back as the same double), and tonumber reads either back. Where Redis
-- wants an integer (PX) or a number goes into a string, num() prints it:
-- tostring and '..' print "%.14g" and would round a time in microseconds,
-- and the shortest form may have an exponent.
local floor, ceil, max, min, fmod = math.floor, math.ceil, math.max, math.min, math.fmod
local two53 = 9007199254740992
-- The globals the scripts use, as locals: a library's globals are an
-- empty table whose metatable leads to Redis's, two lookups each time.
local redis, string, type, tostring, tonumber, error, pcall, ipairs, unpack = redis, string, type, tostring, tonumber, error, pcall, ipairs, unpack

--
-- A call prints the same few numbers again and again (a window's end, a
-- run's expiry), so num keeps what it printed for the rest of the call.
local printed = {}
local function num(n)
  local s = printed[n]
  if not s then
    s = string.format('%.0f', n)
    printed[n] = s
  end
  return s
end

-- fail raises an error that Redis replies with as is, and that the batch
-- script's pcall catches as a table, like the errors redis.call raises.
local function fail(msg)
  error({err = 'ERR sluice: ' .. msg}, 0)
end

-- numbers holds what tonumber made of the strings that number read
-- (false: no number), for the calls after: a library keeps it, and a
-- batch's counts, limits and costs repeat from call to call, as a fixed
-- window's start and counts do from key to key, where tonumber reads each
-- with strtod, about a thousand instructions. Emptied when it reaches
-- 4,096 strings.
local numbers, numbered = {}, 0
local function number(v)
  if v == nil then
    return nil
  end
  local n = numbers[v]
  if n == nil then
    n = tonumber(v) or false
    if numbered == 4096 then
      numbers, numbered = {}, 0
    end
    numbers[v], numbered = n, numbered + 1
  end
  return n or nil
end

-- int reads a stored integer: absent (false or nil) is 0.
local function int(v, key)
  if not v then
    return 0
  end
  local n = number(v)
  if not n then
    fail('key ' .. key .. ' holds ' .. string.format('%q', v) .. ', not a number')
  end
  return n
end

-- pinned is true when the caller pinned the clock (tests only).
--
-- Redis expires keys on its own clock, which a pinned clock does not move.
-- So on a pinned clock a key's expire time carries its state's end on that
-- clock instead: PEXPIREAT (or SET PXAT) to the end in µs plus shift, read
-- as a time in ms that lies tens of millennia ahead, so Redis never drops
-- the key on its own. Before a request touches a key, forget deletes it
-- when the pinned clock has passed that end, as Redis deletes an expired
-- key on access. That keeps the writer's end to the µs, as the in-memory
-- store does, and every key still has a TTL.
local pinned = false
local shift = 4503599627370496 -- 2^52: ends + shift stays below 2^53

-- begin starts a call: it forgets printed and pinned, the per-call state
-- above. A script's top level runs again on every EVALSHA, but a
-- library's runs once, at FUNCTION LOAD, and its locals live on between
-- FCALLs: a batch with a pinned clock would leave the next one pinned,
-- and printed would grow with every number any call printed.
local function begin()
  printed, pinned = {}, false
end

-- px is SET's expiry option for state that ends at ends (µs): on Redis's
-- clock, PX with the µs left rounded up to whole ms, at least 1.
local function px(now, ends)
  if pinned then
    return 'PXAT', num(ends + shift)
  end
  return 'PX', num(max(ceil((ends - now) / 1000), 1))
end

-- expire gives key the TTL of state that ends at ends (µs).
local function expire(key, now, ends)
  local _, at = px(now, ends)
  redis.call(pinned and 'PEXPIREAT' or 'PEXPIRE', key, at)
end

-- forget deletes key, on a pinned clock, when its state has ended.
local function forget(key, now)
  if pinned then
    local at = redis.call('PEXPIRETIME', key)
    if at >= 0 and now >= at - shift then
      redis.call('DEL', key)
    end
  end
end

-- clock is now in µs since the epoch: the pinned time when one is given,
-- otherwise started, Redis's own clock as the call read it (TIME), so
-- that every sidecar agrees on the time.
local function clock(arg, started)
  if arg ~= nil and arg ~= '' then
    local n = tonumber(arg)
    if not n or n ~= floor(n) or math.abs(n) >= shift / 2 then
      fail('invalid pinned now ' .. string.format('%q', arg))
    end
    pinned = true
    return n
  end
  return started
end

-- redisTime is Redis's clock now, in µs since the epoch.
local function redisTime()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- late tells whether a call that started at started (Redis's TIME) comes
-- after deadline (µs on Redis's clock; 0 or absent: none): the time after
-- which the caller has answered the call's requests without it (its
-- failure mode), so that charging them now would take budget for requests
-- that were never decided here. A late call changes nothing.
local function late(deadline, started)
  local d = tonumber(deadline)
  return d ~= nil and d > 0 and started > d
end

-- checked reads a non-negative integer argument: it, or nil and the error
-- param raises.
local function checked(v, name)
  local n = number(v)
  if not n or n < 0 or n % 1 ~= 0 or n >= two53 then
    return nil, {err = 'ERR sluice: invalid ' .. name .. ' ' .. string.format('%q', tostring(v)) .. ': want an integer in [0, 2^53)'}
  end
  return n
end

-- param reads a non-negative integer argument.
local function param(v, name)
  local n, err = checked(v, name)
  if err then
    error(err, 0)
  end
  return n
end

-- limit reads a limit's rate, period (µs) and burst from args (the
-- script's arguments: ARGV, or what stands for it) starting at i.
local function limit(args, i)
  local rate, period = param(args[i], 'rate'), param(args[i + 1], 'period')
  if rate < 1 or period < 1 then
    fail('rate and period must be at least 1')
  end
  return rate, period, param(args[i + 2], 'burst')
end

-- muldiv returns floor(a * b / c) and a * b mod c, exactly, for integers
-- 0 <= a, b < 2^53 and 1 <= c < 2^53 whose quotient is below 2^53, as
-- engine's mulDiv does with a 128-bit product. When a * b is below 2^53
-- the double holds it exactly (and when it is not, the rounded double is
-- not below 2^53 either). Past that, the product is built a bit of b at a
-- time as q * c + r with r < c: doubling r stays exact below 2^54, and
-- every difference taken is exact, being an integer below 2^53.
local function muldiv(a, b, c)
  local p = a * b
  if p < two53 then
    local q = floor(p / c)
    return q, p - q * c
  end
  local qa = floor(a / c)
  local ra = a - qa * c
  local bit = 1
  while bit * 2 <= b do
    bit = bit * 2
  end
  local q, r = 0, 0
  while bit >= 1 do
    q, r = q * 2, r * 2
    if r >= c then
      q, r = q + 1, r - c
    end
    if b >= bit then
      b = b - bit
      q = q + qa
      if r >= c - ra then
        q, r = q + 1, r - (c - ra)
      else
        r = r + ra
      end
    end
    bit = bit / 2
  end
  return q, r
end

-- Exact intervals (engine/fraction.go says why). A limit's interval is
-- period / rate = q + r / d µs, d = rate; a time or span is a pair: µs and
-- a remainder f in units of 1/d µs, 0 <= f < d.

-- interval returns q, r and d for a limit.
local function interval(rate, period)
  local q = floor(period / rate)
  if q < 1 then
    fail('rate is more than one per microsecond')
  end
  return q, period - q * rate, rate
end

-- times is k intervals.
local function times(k, q, r, d)
  local c, f = muldiv(k, r, d)
  return k * q + c, f
end

local function add(a, f, b, g, d)
  if f >= d - g then
    return a + b + 1, f - (d - g)
  end
  return a + b, f + g
end

local function sub(a, f, b, g, d)
  if f < g then
    return a - b - 1, f + (d - g)
  end
  return a - b, f - g
end

-- up is a time or span rounded up to whole µs: a wait never too short.
local function up(a, f)
  if f > 0 then
    return a + 1
  end
  return a
end

-- fit is how many whole intervals, of period / d µs, fit in a span.
local function fit(a, f, period, d)
  local q, r = muldiv(a, d, period)
  if f >= period - r then
    q = q + 1
  end
  return q
end

-- fitUp is how many intervals a span takes, a part of one counting as one.
local function fitUp(a, f, period, d)
  local q, r = muldiv(a, d, period)
  r = r + f
  if r >= period then
    q, r = q + 1, r - period
  end
  if r > 0 then
    q = q + 1
  end
  return q
end

-- Every algorithm is a table of four functions, so that the batch script
-- decides all of a key's requests with one read and one write, each
-- request with the same arithmetic as if it came alone:
--
--   prepare(L)  checks the limit L = {rate, period, burst} and computes,
--               once, what every decision under it shares (L.capacity is
--               the limit a decision reports); raises on a bad limit
--   read(key, now, L, cost, peek, memo, got) -> s [, allowed, remaining,
--               retry_after, reset_after, delay]
--               reads key's state into s, the algorithm's one scratch
--               table; cost and peek are the first request's, which a
--               read may decide and store at once (a claim, bucket.lua):
--               it then returns that decision after s, and s is the state
--               after it. memo is a table the caller keeps for a limit and
--               cost (batch.lua's memoOf), where a read keeps what it
--               works out the same for every key; got, what claimRun
--               found in key, if it just tried
--   claimRun(keys, from, to, now, L, cost, memo) -> claimed, got
--               optional: claims keys[from] to keys[to], each one take
--               of cost, in turn while they are empty, and returns how
--               many it claimed and what the next one held (memo.claim is
--               each claim's decision)
--   step(s, key, now, L, cost, peek, over) -> allowed, remaining,
--               retry_after, reset_after, delay
--               decides one request against s and changes s as storing
--               its outcome would change the key; it raises before it
--               changes anything, so s stays the state before the request.
--               remaining is never below zero unless over is set (the
--               look after a charge, batch.lua): then, how far over
--   write(key, now, s, L)
--               stores s, which a step changed (s.dirty is set: the
--               caller writes nothing else), with the TTL the last change
--               sets
--   force(s, key, now, L, c)
--               takes c units whatever is left, as far as a debt of one
--               capacity (a charge, batch.lua); the sliding log has none
--   anchor(s, L), refund(s, key, now, L, cost, anchor)
--               optional, together: the anchor of the grant a take just
--               stored in s, and giving back cost units of the grant
--               anchored at anchor, as far as engine's refund does (a
--               grant and a refund, batch.lua); only fixed, sliding,
--               token and gcra have them
--   commit(s)   optional: stores the outcome of the step just before, a
--               peek at a cost above 0 that admitted, as a take would
--               have (its reply is the peek's): a multi-limit request
--               whose limits all admit takes without stepping again
--
-- now is the same for every request of a call, and Redis's clock stands
-- still for keys while a script runs, so no key expires between two of
-- its steps: deciding them against s is deciding them one by one.
