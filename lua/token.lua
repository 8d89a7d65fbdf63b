-- Token bucket: bursts up to capacity (burst), refilled one token per
-- interval (period / rate). It is bucket.lua's algorithm: tokens used are
-- ceil((z - now) / interval), so that a request fits when z, moved cost
-- intervals on, stays within capacity intervals of now.
local token = newBucket(0, false, true)
