-- Leaky bucket: a queue of at most capacity (burst) units, drained one unit
-- per interval (period / rate). An admitted request waits delay for its turn.
-- State: one integer string, the time (µs) the queue drains (the next free
-- slot); engine's state a.
local function leaky(key, now, rate, period, burst, cost, peek)
  local t, capacity = interval(rate, period), burst
  local start = max(int(redis.call('GET', key), key), now)
  local e = start + cost * t
  local allowed = e - now <= capacity * t
  local drains, delay, retry = start, 0, 0
  if allowed then
    drains = e
    delay = start - now
  else
    retry = e - capacity * t - now
  end
  local remaining = floor(max(capacity * t - (drains - now), 0) / t)
  if allowed and not peek and cost > 0 then
    redis.call('SET', key, e, px(now, e))
  end
  return allowed, capacity, remaining, retry, drains - now, delay
end
