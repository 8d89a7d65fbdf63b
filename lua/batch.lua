-- Decides many requests in one call, in order, each against its own key
-- with its own algorithm. One request's error (a key of the wrong type, a bad
-- argument) fails that request alone: each runs under pcall.
--
-- KEYS[i]  request i's key
-- ARGV     six fields per request: algorithm (fixed, log, sliding, token,
--          leaky or gcra), rate, period (µs), burst, cost, peek (1 or 0);
--          then, for tests only, an optional last field: now (µs), which
--          pins the clock, otherwise Redis's TIME, read once for the batch.
--
-- Reply: six integers per request, in order: allowed (1 or 0), limit,
-- remaining, retry_after (µs), reset_after (µs), delay (µs); then the error
-- messages. A request that failed has allowed = -1 and, as its limit, the
-- 1-based index of its message among them.
local algorithms = {fixed = fixed, log = log, sliding = sliding, token = token, leaky = leaky, gcra = gcra}
local n = #KEYS
if #ARGV ~= 6 * n and #ARGV ~= 6 * n + 1 then
  fail('want 6 arguments per key and an optional now, got ' .. #ARGV .. ' for ' .. n .. ' keys')
end
local now = clock(ARGV[6 * n + 1])

local function one(i)
  local j = 6 * (i - 1) + 1
  local decide = algorithms[ARGV[j]]
  if not decide then
    fail('unknown algorithm ' .. string.format('%q', ARGV[j]))
  end
  local rate, period, burst, cost, peek = decode(j + 1)
  forget(KEYS[i], now)
  return decide(KEYS[i], now, rate, period, burst, cost, peek)
end

local out, errors = {}, {}
for i = 1, n do
  local o = 6 * (i - 1)
  local ok, allowed, limit, remaining, retry, reset, delay = pcall(one, i)
  if ok then
    out[o + 1], out[o + 2], out[o + 3] = allowed and 1 or 0, limit, remaining
    out[o + 4], out[o + 5], out[o + 6] = retry, reset, delay
  else
    -- redis.call and fail raise {err = message}; anything else a string.
    local msg = allowed
    if type(msg) == 'table' then
      msg = msg.err
    end
    errors[#errors + 1] = tostring(msg)
    out[o + 1], out[o + 2], out[o + 3] = -1, #errors, 0
    out[o + 4], out[o + 5], out[o + 6] = 0, 0, 0
  end
end
for k = 1, #errors do
  out[6 * n + k] = errors[k]
end
return out
