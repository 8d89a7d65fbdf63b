-- Sliding window log: exact, one entry per admitted unit.
-- State: a sorted set, score = the unit's time (µs), member = time..':'..seq,
-- unique among the members of that time. Engine's state log.
--
-- An entry counts while it is younger than the period: t > now - p. Only an
-- admission writes; a peek or a refusal counts past the stale entries
-- without removing them, which decides the same.
local function log(key, now, rate, period, burst, cost, peek)
  local p, limit = period, rate
  local cut = now - p
  local live = '(' .. num(cut)
  local n = redis.call('ZCOUNT', key, live, '+inf')
  local newest = 0
  if n > 0 then
    newest = int(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2], key)
  end
  local allowed = n + cost <= limit
  local retry, remaining, reset = 0, 0, 0
  if not allowed then
    -- The request fits once the oldest n+cost-limit entries age out.
    local at = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', n + cost - limit - 1, 1)
    retry = int(at[2], key) + p - now
    remaining = limit - n
  else
    remaining = limit - n - cost
    if cost > 0 then
      newest = max(newest, now)
    end
  end
  if remaining < limit then
    reset = newest + p - now
  end
  if allowed and not peek and cost > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', num(cut))
    local at = num(now)
    local seq = redis.call('ZCOUNT', key, at, at)
    -- ZADD in chunks: unpack is bounded by Lua's C stack (about 8000).
    local i = 0
    while i < cost do
      local args, m = {}, 0
      for _ = 1, math.min(cost - i, 1000) do
        i = i + 1
        args[m + 1], args[m + 2] = at, at .. ':' .. num(seq + i)
        m = m + 2
      end
      redis.call('ZADD', key, unpack(args))
    end
    expire(key, now, newest + p)
  end
  return allowed, limit, remaining, retry, reset, 0
end
