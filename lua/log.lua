-- Sliding window log: exact, one entry per admitted request whatever its
-- cost, so that any request costs O(log n) (engine's slidingLog says how).
-- State: a sorted set, score = the request's time (µs), member =
-- 'before/cost', the running total of the costs admitted before it (modulo
-- 2^52, where differences are taken too; 16 digits, zero-padded, since
-- members of one score sort as strings) and its own cost, so the newest
-- member holds the running total: one key, as every algorithm keeps.
-- Engine's state log (and a, the running total). Times and totals ascend
-- together: a request under a clock that stepped back is logged at the
-- newest time, and one whose total wrapped past 2^52 a µs after the newest.
--
-- An entry counts while it is younger than the period: t > now - p. Only an
-- admission writes; a peek or a refusal looks past the stale entries
-- without removing them, which decides the same.
local logModulus = 4503599627370496 -- 2^52

local function logSpan(from, to)
  return (to - from) % logModulus
end

-- logEntry reads a member: the running total before it, and its cost.
local function logEntry(member, key)
  local before, cost = string.match(member or '', '^(%d+)/(%d+)$')
  if not before then
    fail('key ' .. key .. ' holds the entry ' .. string.format('%q', tostring(member)) .. ', not before/cost')
  end
  return tonumber(before), tonumber(cost)
end

-- legacyLog rewrites, once, a log that an earlier version kept with one
-- member 'time:seq' per unit: one entry per time, carrying its units.
local function legacyLog(key)
  local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local ttl = redis.call('PEXPIRETIME', key)
  redis.call('DEL', key)
  local total, i = 0, 1
  while i < #all do
    local at, units = all[i + 1], 0
    while i < #all and all[i + 1] == at do
      units, i = units + 1, i + 2
    end
    redis.call('ZADD', key, at, string.format('%016.0f/%.0f', total, units))
    total = total + units
  end
  if ttl > 0 then
    redis.call('PEXPIREAT', key, ttl)
  end
end

local function log(key, now, rate, period, burst, cost, peek)
  local p, limit = period, rate
  local cut = now - p
  local live = '(' .. num(cut)
  local first = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'LIMIT', 0, 1)[1]
  if first and string.find(first, ':', 1, true) then
    legacyLog(key)
    first = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'LIMIT', 0, 1)[1]
  end
  local n, newest, base, total, wrapped = 0, 0, 0, 0, false
  if first then
    base = logEntry(first, key)
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    local before, c = logEntry(last[1], key)
    total = (before + c) % logModulus
    wrapped = total < before
    n = logSpan(base, total)
    newest = int(last[2], key)
  end
  local allowed = n + cost <= limit
  local retry, remaining, reset = 0, 0, 0
  if not allowed then
    -- The request fits once the oldest need units have aged out: with the
    -- last entry whose total before it is short of need. Each entry holds
    -- at least one unit, so it is one of the need entries from the first
    -- live one: a binary search over ranks.
    local need = n + cost - limit
    local lo = redis.call('ZCOUNT', key, '-inf', num(cut))
    local hi = min(lo + need, redis.call('ZCARD', key)) - 1
    while lo < hi do
      local mid = ceil((lo + hi) / 2)
      if logSpan(base, (logEntry(redis.call('ZRANGE', key, mid, mid)[1], key))) < need then
        lo = mid
      else
        hi = mid - 1
      end
    end
    retry = int(redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')[2], key) + p - now
    remaining = max(limit - n, 0)
  else
    remaining = limit - n - cost
    if cost > 0 then
      if wrapped then
        newest = newest + 1
      end
      newest = max(newest, now)
    end
  end
  if n > 0 or (allowed and cost > 0) then
    reset = newest + p - now
  end
  if allowed and not peek and cost > 0 then
    -- With nothing live, the running total starts afresh at 0.
    redis.call('ZREMRANGEBYSCORE', key, '-inf', num(cut))
    redis.call('ZADD', key, newest, string.format('%016.0f/%.0f', total, cost))
    expire(key, now, newest + p)
  end
  return allowed, limit, remaining, retry, reset, 0
end
