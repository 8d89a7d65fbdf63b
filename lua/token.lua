-- Token bucket: bursts up to capacity (burst), refilled one token per
-- interval (period / rate).
-- State: a hash {used = tokens used, last = time (µs) of the last whole-token
-- refill}; engine's state a, b.
local function token(key, now, rate, period, burst, cost, peek)
  local t, capacity = interval(rate, period), burst
  local st = redis.call('HMGET', key, 'used', 'last')
  local used, last = int(st[1], key), int(st[2], key)
  if used > 0 and now > last then
    -- Refill whole tokens only, and keep the time of the last one, so no
    -- fraction of a token is ever lost or rounded.
    local refilled = floor((now - last) / t)
    if refilled >= used then
      used = 0
    else
      used = used - refilled
      last = last + refilled * t
    end
  end
  if used == 0 then
    last = now
  end
  local allowed = used + cost <= capacity
  local retry, reset = 0, 0
  if allowed then
    used = used + cost
  else
    retry = last + (used + cost - capacity) * t - now
  end
  if used > 0 then
    reset = last + used * t - now
  end
  if allowed and not peek and cost > 0 then
    redis.call('HSET', key, 'used', used, 'last', last)
    expire(key, now, last + used * t)
  end
  return allowed, capacity, capacity - used, retry, reset, 0
end
