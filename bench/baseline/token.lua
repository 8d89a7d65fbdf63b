-- A token bucket as an application without Sluice would write it: the
-- tokens and the time they were counted in one hash (HMGET, HSET,
-- PEXPIRE), refilled by the time elapsed on Redis's clock.
-- KEYS[1]: the key. ARGV: capacity, rate, period (ms), cost.
-- Replies {allowed, capacity, remaining, retry_after_ms}.
local capacity, rate, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local cost = tonumber(ARGV[4]) or 1
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local per_ms = rate / period
local tokens = tonumber(state[1]) or capacity
local ts = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + (now - ts) * per_ms)
local allowed, retry = 0, math.ceil((cost - tokens) / per_ms)
if tokens >= cost then
  tokens, allowed, retry = tokens - cost, 1, 0
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - tokens) / per_ms) + 1)
return {allowed, capacity, math.floor(tokens), retry}
