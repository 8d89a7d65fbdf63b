-- GCRA, as redis-cell's CL.THROTTLE computes it: bucket.lua's algorithm,
-- with limit = burst + 1 and a delay variation tolerance of limit
-- intervals (period / rate).
local function gcra(key, now, rate, period, burst, cost, peek)
  return bucket(key, now, rate, period, burst + 1, cost, peek, false, false)
end
