-- Sliding window counter: the current window's count plus the previous
-- window's, weighted by how much of it the sliding period still covers.
-- State: a hash {w = current window start (µs), curr = its count,
-- prev = the previous window's count}; engine's state a, b, c.
--
-- The weighting is float arithmetic in exactly the order engine/algorithms.go
-- does it (ceil(prev * ((p - e) / p)) and floor(room * p / count)), so both
-- round identically.
local function sliding(key, now, rate, period, burst, cost, peek)
  local p, limit = period, rate
  local st = redis.call('HMGET', key, 'w', 'curr', 'prev')
  local a, b, c = int(st[1], key), int(st[2], key), int(st[3], key)
  local w = max(now - math.fmod(now, p), a)
  local curr, prev = 0, 0
  if a == w then
    curr, prev = b, c
  elseif a == w - p then
    prev = b
  end
  local elapsed = max(now - w, 0)
  local used = curr + ceil(prev * ((p - elapsed) / p))
  local allowed = used + cost <= limit
  local retry, reset = 0, 0
  if allowed then
    curr = curr + cost
    used = used + cost
  else
    -- When the request would fit: later in this window, as the previous
    -- window's weight falls, or in the next, where this window's count
    -- becomes the weighted one.
    local room = limit - cost - curr
    if room >= 0 then
      retry = w + p - floor(room * p / prev) - now
    else
      room = limit - cost
      if room >= curr then
        retry = w + p - now
      else
        retry = w + 2 * p - floor(room * p / curr) - now
      end
    end
    retry = max(retry, 1)
  end
  if curr > 0 then
    reset = w + 2 * p - now
  elseif prev > 0 then
    reset = w + p - now
  end
  if allowed and not peek and cost > 0 then
    redis.call('HSET', key, 'w', w, 'curr', curr, 'prev', prev)
    expire(key, now, w + 2 * p)
  end
  return allowed, limit, max(limit - used, 0), retry, reset, 0
end
