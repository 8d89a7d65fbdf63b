-- Leaky bucket: a queue of at most capacity (burst) units, drained one unit
-- per interval (period / rate). It is bucket.lua's algorithm, where z is when the
-- queue drains; an admitted request waits delay for its turn.
local function leaky(key, now, rate, period, burst, cost, peek)
  return bucket(key, now, rate, period, burst, cost, peek, true, false)
end
