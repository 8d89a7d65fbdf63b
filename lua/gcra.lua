-- GCRA, as redis-cell's CL.THROTTLE computes it: bucket.lua's algorithm,
-- with limit = burst + 1 and a delay variation tolerance of limit
-- intervals (period / rate).
local gcra = newBucket(1, false, false)
