-- Decides one request against one key with the algorithm defined above as
-- decide.
--
-- KEYS[1]  the key
-- ARGV     rate, period (µs), burst, cost, peek (1 or 0) [, now (µs)]
--
-- now is for tests only: it pins the clock, which otherwise is Redis's TIME.
--
-- Reply: allowed (1 or 0), limit, remaining, retry_after (µs),
-- reset_after (µs), delay (µs).
local now = clock(ARGV[6])
local rate, period, burst = limit(1)
local cost, peek = param(ARGV[4], 'cost'), ARGV[5] == '1'
forget(KEYS[1], now)
local allowed, capacity, remaining, retry, reset, delay = one(decide, KEYS[1], now, rate, period, burst, cost, peek)
return {allowed and 1 or 0, capacity, remaining, retry, reset, delay}
