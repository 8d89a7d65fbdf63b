-- Leaky bucket: a queue of at most capacity (burst) units, drained one unit
-- per interval (period / rate). An admitted request waits delay for its turn.
-- State: one number, the time (µs) the queue drains (the next free
-- slot); engine's state a.
local function leaky(key, now, rate, period, burst, cost, peek)
  local t, capacity = interval(rate, period), burst
  local writes = not peek and cost > 0
  local stored, claimed = claim(key, now, now + cost * t, writes and cost <= capacity)
  local start = max(int(stored, key), now)
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
  if allowed and writes and not claimed then
    redis.call('SET', key, e, px(now, e))
  end
  return allowed, capacity, remaining, retry, drains - now, delay
end
