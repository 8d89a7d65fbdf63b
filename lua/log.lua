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

local log = {}

function log.prepare(L)
  L.capacity = L.rate
end

-- The state a step needs: s.live, whether an entry is live; s.base, the
-- running total before the oldest live entry; s.total, the running total;
-- s.wrapped, whether the newest entry's total wrapped; s.newest, its
-- time. The entries a call adds wait in s.times, s.befores and s.costs
-- (s.added of them) until write. A refusal looks for an entry by its rank
-- among the live ones: the stored live ones (s.stale is how many older
-- ones precede them, s.card all stored, read once), then the added ones;
-- s.seen keeps the stored ones already read. s.drop is what write drops
-- before it adds: 'all' entries, the 'stale' ones, or nothing (false) from
-- a key that holds none.
local logState = {times = {}, befores = {}, costs = {}}

function log.read(key, now, L)
  local s = logState
  local cut = now - L.period
  s.live, s.base, s.total, s.wrapped, s.newest = false, 0, 0, false, 0
  s.cut, s.added, s.stale, s.card, s.seen, s.dirty = cut, 0, nil, nil, nil, false
  -- The newest entry first: on an empty key (most keys, idle past their
  -- period) it is the only read, and with it stale, so is every entry,
  -- which write then drops with the key.
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if not last[1] then
    s.drop = false
    return s
  end
  if int(last[2], key) <= cut then
    s.drop = 'all'
    return s
  end
  s.drop = 'stale'
  local live = '(' .. num(cut)
  local first = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'LIMIT', 0, 1)[1]
  if string.find(first, ':', 1, true) or string.find(last[1], ':', 1, true) then
    legacyLog(key)
    first = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'LIMIT', 0, 1)[1]
    last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  end
  -- With nothing live, the running total starts afresh at 0.
  s.live, s.base = true, logEntry(first, key)
  local before, c = logEntry(last[1], key)
  s.total = (before + c) % logModulus
  s.wrapped = s.total < before
  s.newest = int(last[2], key)
  return s
end

-- logAt is the total before the live entry of rank j (from 0), and its
-- time.
local function logAt(s, key, j)
  local stored = s.card - s.stale
  if j >= stored then
    j = j - stored + 1
    if j > s.added then
      return 0, 0
    end
    return s.befores[j], s.times[j]
  end
  local e = s.seen[j]
  if not e then
    local got = redis.call('ZRANGE', key, s.stale + j, s.stale + j, 'WITHSCORES')
    e = {(logEntry(got[1], key)), int(got[2], key)}
    s.seen[j] = e
  end
  return e[1], e[2]
end

function log.step(s, key, now, L, cost, peek, over)
  local p, limit = L.period, L.rate
  local n, newest = 0, s.newest
  if s.live then
    n = logSpan(s.base, s.total)
  end
  local allowed = n + cost <= limit
  local retry, remaining, reset = 0, 0, 0
  if not allowed then
    -- The request fits once the oldest need units have aged out: with the
    -- last entry whose total before it is short of need. Each entry holds
    -- at least one unit, so it is one of the need entries from the first
    -- live one: a binary search over ranks.
    if not s.seen then
      s.stale = redis.call('ZCOUNT', key, '-inf', num(s.cut))
      s.card, s.seen = redis.call('ZCARD', key), {}
    end
    local need = n + cost - limit
    local lo, hi = 0, min(need, s.card - s.stale + s.added) - 1
    while lo < hi do
      local mid = ceil((lo + hi) / 2)
      if logSpan(s.base, (logAt(s, key, mid))) < need then
        lo = mid
      else
        hi = mid - 1
      end
    end
    local _, at = logAt(s, key, lo)
    retry = at + p - now
    remaining = max(limit - n, 0) -- 0 under a lowered limit (a log takes no charge)
  else
    remaining = limit - n - cost
    if cost > 0 then
      if s.wrapped then
        newest = newest + 1
      end
      newest = max(newest, now)
    end
  end
  if n > 0 or (allowed and cost > 0) then
    reset = newest + p - now
  end
  if allowed and not peek and cost > 0 then
    local before = s.total
    if not s.live then
      s.live, s.base = true, before
    end
    local a = s.added + 1
    s.times[a], s.befores[a], s.costs[a], s.added = newest, before, cost, a
    s.total = (before + cost) % logModulus
    s.wrapped, s.newest, s.dirty = s.total < before, newest, true
  end
  return allowed, remaining, retry, reset, 0
end

-- logChunk bounds the entries one ZADD adds: unpack puts each argument
-- on Lua's stack, which holds 8,000.
local logChunk = 1000

function log.write(key, now, s, L)
  if s.drop == 'all' then
    redis.call('DEL', key)
  elseif s.drop then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', num(s.cut))
  end
  for from = 1, s.added, logChunk do
    local args, m = {}, 0
    for a = from, min(from + logChunk - 1, s.added) do
      args[m + 1], args[m + 2] = s.times[a], string.format('%016.0f/%.0f', s.befores[a], s.costs[a])
      m = m + 2
    end
    redis.call('ZADD', key, unpack(args))
  end
  expire(key, now, s.newest + L.period)
end
