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
-- one decides a single request with algorithm A.
local function one(A, key, now, rate, period, burst, cost, peek)
  local L = {rate = rate, period = period, burst = burst}
  A.prepare(L)
  local s, allowed, remaining, retry, reset, delay = A.read(key, now, L, cost, peek, {})
  if allowed == nil then
    allowed, remaining, retry, reset, delay = A.step(s, key, now, L, cost, peek)
  end
  if s.dirty then
    A.write(key, now, s, L)
  end
  return allowed, L.capacity, remaining, retry, reset, delay
end

local now = clock(ARGV[6])
local rate, period, burst = limit(1)
local cost, peek = param(ARGV[4], 'cost'), ARGV[5] == '1'
forget(KEYS[1], now)
local allowed, capacity, remaining, retry, reset, delay = one(decide, KEYS[1], now, rate, period, burst, cost, peek)
return {allowed and 1 or 0, capacity, remaining, retry, reset, delay}
