-- Decides many requests in one call, in order, each against its own key
-- with its own limit. One request's error (a key of the wrong type, a bad
-- argument) fails that request alone.
--
-- A batch's requests mostly share a few limits (a policy's) and a cost of
-- 1, so neither comes per request: the limits come once, in a table, and
-- the requests in runs that share a limit and a cost. A batch of one
-- policy is one run, and Redis parses only its keys per request.
--
-- KEYS[i]  request i's key
-- ARGV     the number of limits, m; five fields per limit: algorithm
--          (fixed, log, sliding, token, leaky or gcra), rate, period (µs),
--          burst, peek (1 or 0); the number of runs, r; three fields per
--          run: its number of requests, its limit's index (1-based) and
--          its cost; the runs' requests are the keys, in order. Then, for
--          tests only, an optional last field: now (µs), which pins the
--          clock, otherwise Redis's TIME, read once for the batch.
--
-- Reply: five integers per request, in order: allowed (1 or 0), remaining,
-- retry_after (µs), reset_after (µs), delay (µs); then the error messages,
-- each once. A request that failed has, as allowed, -k, k the 1-based index
-- of its message. The limit a decision reports is not sent: it follows from
-- the limit asked (engine's Limit.Capacity), and a smaller reply is less
-- for Redis to encode and for the caller to parse.
local algorithms = {fixed = fixed, log = log, sliding = sliding, token = token, leaky = leaky, gcra = gcra}
local n = #KEYS
local m = tonumber(ARGV[1])
if not m or m < 0 or m ~= floor(m) then
  fail('invalid number of limits ' .. string.format('%q', tostring(ARGV[1])))
end
if #ARGV < 2 + 5 * m then
  fail('want ' .. m .. ' limits of 5 arguments and a number of runs, got ' .. #ARGV .. ' arguments')
end
local r = tonumber(ARGV[2 + 5 * m])
if not r or r < 0 or r ~= floor(r) then
  fail('invalid number of runs ' .. string.format('%q', tostring(ARGV[2 + 5 * m])))
end
local first = 3 + 5 * m -- the first run's field
if #ARGV ~= first - 1 + 3 * r and #ARGV ~= first + 3 * r then
  fail('want ' .. m .. ' limits of 5 arguments, ' .. r .. ' runs of 3 and an optional now, got ' .. #ARGV .. ' arguments')
end
local now = clock(ARGV[first + 3 * r])

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

-- Each run is read and checked once too: its size, its limit, its cost.
local sizes, runs, total = {}, {}, 0
for k = 1, r do
  local j = first + 3 * (k - 1)
  local size = tonumber(ARGV[j])
  if not size or size < 0 or size ~= floor(size) then
    fail('invalid run size ' .. string.format('%q', ARGV[j]))
  end
  sizes[k], total = size, total + size
  local ok, cost = pcall(param, ARGV[j + 2], 'cost')
  local l = limits[tonumber(ARGV[j + 1])]
  if not l then
    runs[k] = {err = {err = 'ERR sluice: no limit ' .. string.format('%q', ARGV[j + 1])}}
  elseif l.err then
    runs[k] = l
  elseif not ok then
    runs[k] = {err = cost}
  else
    runs[k] = {decide = l.decide, rate = l.rate, period = l.period, burst = l.burst, peek = l.peek, cost = cost}
  end
end
if total ~= n then
  fail('the runs hold ' .. total .. ' requests for ' .. n .. ' keys')
end

local out, errors, seen = {}, {}, {}
-- i is the next request to decide, in run k, which has left requests
-- after it. decided decides from i on until the end or a request's error,
-- so that the batch pays for one pcall, not one per request.
local i, k, left = 1, 0, 0
local function decided()
  while i <= n do
    while left == 0 do
      k = k + 1
      left = sizes[k]
    end
    local run = runs[k]
    if run.err then
      error(run.err, 0)
    end
    local key = KEYS[i]
    if pinned then
      forget(key, now)
    end
    local allowed, _, remaining, retry, reset, delay = run.decide(key, now, run.rate, run.period, run.burst, run.cost, run.peek)
    local o = 5 * (i - 1)
    out[o + 1], out[o + 2], out[o + 3] = allowed and 1 or 0, remaining, retry
    out[o + 4], out[o + 5] = reset, delay
    i, left = i + 1, left - 1
  end
end
while i <= n do
  local ok, msg = pcall(decided)
  if not ok then
    -- redis.call and fail raise {err = message}; anything else a string.
    if type(msg) == 'table' then
      msg = msg.err
    end
    msg = tostring(msg)
    -- A bad limit or run fails all its requests with one message.
    local e = seen[msg]
    if not e then
      e = #errors + 1
      errors[e], seen[msg] = msg, e
    end
    local o = 5 * (i - 1)
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = -e, 0, 0, 0, 0
    i, left = i + 1, left - 1
  end
end
for e = 1, #errors do
  out[5 * n + e] = errors[e]
end
return out
