-- Decides many requests in one call, in order, each against its own key
-- with its own limit. One request's error (a key of the wrong type, a bad
-- argument) fails that request alone: each runs under pcall.
--
-- The requests of a batch mostly share a few limits (a policy's), so the
-- limits come once, in a table, and each request names one by its index:
-- two arguments per request instead of six, which is less for Redis to
-- parse and for the script to check.
--
-- KEYS[i]  request i's key
-- ARGV     the number of limits, m; then five fields per limit: algorithm
--          (fixed, log, sliding, token, leaky or gcra), rate, period (µs),
--          burst, peek (1 or 0); then two fields per request: its limit's
--          index (1-based) and its cost; then, for tests only, an optional
--          last field: now (µs), which pins the clock, otherwise Redis's
--          TIME, read once for the batch.
--
-- Reply: six integers per request, in order: allowed (1 or 0), limit,
-- remaining, retry_after (µs), reset_after (µs), delay (µs); then the error
-- messages. A request that failed has allowed = -1 and, as its limit, the
-- 1-based index of its message among them.
local algorithms = {fixed = fixed, log = log, sliding = sliding, token = token, leaky = leaky, gcra = gcra}
local n = #KEYS
local m = tonumber(ARGV[1])
if not m or m < 0 or m ~= floor(m) then
  fail('invalid number of limits ' .. string.format('%q', tostring(ARGV[1])))
end
local first = 2 + 5 * m -- the first request's field
if #ARGV ~= first - 1 + 2 * n and #ARGV ~= first + 2 * n then
  fail('want ' .. m .. ' limits of 5 arguments, 2 per key and an optional now, got ' .. #ARGV .. ' arguments for ' .. n .. ' keys')
end
local now = clock(ARGV[first + 2 * n])

-- Each limit is read and checked once; one that is bad fails the requests
-- that name it.
local limits = {}
for l = 1, m do
  local j = 2 + 5 * (l - 1)
  local ok, rate, period, burst = pcall(limit, j + 1)
  local decide = algorithms[ARGV[j]]
  if not ok then
    limits[l] = {err = rate}
  elseif not decide then
    limits[l] = {err = {err = 'ERR sluice: unknown algorithm ' .. string.format('%q', ARGV[j])}}
  else
    limits[l] = {decide = decide, rate = rate, period = period, burst = burst, peek = ARGV[j + 4] == '1'}
  end
end

local function one(i)
  local j = first + 2 * (i - 1)
  local l = limits[tonumber(ARGV[j])]
  if not l then
    fail('no limit ' .. string.format('%q', tostring(ARGV[j])))
  elseif l.err then
    error(l.err, 0)
  end
  local cost = param(ARGV[j + 1], 'cost')
  forget(KEYS[i], now)
  return l.decide(KEYS[i], now, l.rate, l.period, l.burst, cost, l.peek)
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
