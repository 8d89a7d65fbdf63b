-- Leaky bucket: a queue of at most capacity (burst) units, drained one unit
-- per interval (period / rate). It is bucket.lua's algorithm, where z is when the
-- queue drains; an admitted request waits delay for its turn.
local leaky = newBucket(0, true, false)
