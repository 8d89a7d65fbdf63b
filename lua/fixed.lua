-- Fixed window: one counter per window, windows aligned to the epoch.
-- State: a hash {w = window start (µs), n = count in it}; engine's state a, b.
local function fixed(key, now, rate, period, burst, cost, peek)
  local p, limit = period, rate
  local st = redis.call('HMGET', key, 'w', 'n')
  local a, b = int(st[1], key), int(st[2], key)
  -- fmod truncates like Go's %, also for a time before the epoch. A state
  -- from a later window (the clock stepped back) keeps its window.
  local w = max(now - math.fmod(now, p), a)
  local n = 0
  if a == w then
    n = b
  end
  local e = w + p
  local allowed = n + cost <= limit
  local retry, reset = 0, 0
  if allowed then
    n = n + cost
  else
    retry = e - now
  end
  if n > 0 then
    reset = e - now
  end
  if allowed and not peek and cost > 0 then
    redis.call('HSET', key, 'w', w, 'n', n)
    expire(key, now, e)
  end
  -- A limit lowered on a live key can leave more counted than it allows.
  return allowed, limit, max(limit - n, 0), retry, reset, 0
end
