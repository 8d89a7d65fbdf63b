-- GCRA, as redis-cell's CL.THROTTLE computes it: limit = burst + 1, the
-- delay variation tolerance is limit emission intervals (period / rate).
-- State: one number, the theoretical arrival time (µs); engine's
-- state a.
local function gcra(key, now, rate, period, burst, cost, peek)
  local t, limit = interval(rate, period), burst + 1
  local tolerance = t * limit
  local writes = not peek and cost > 0
  local stored, claimed = claim(key, now, now + cost * t, writes and cost * t <= tolerance)
  local tat = max(int(stored, key), now)
  local new = tat + cost * t
  local allowed, retry, remaining = true, 0, 0
  local left = new - now
  local diff = now - (new - tolerance)
  if diff < 0 then
    allowed = false
    retry = -diff
    left = tat - now
  end
  if tolerance - left > 0 then
    remaining = floor((tolerance - left) / t)
  end
  if allowed and writes and not claimed then
    redis.call('SET', key, new, px(now, new))
  end
  return allowed, limit, remaining, retry, left, 0
end
