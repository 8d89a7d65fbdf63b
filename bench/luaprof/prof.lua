-- Counts the Lua bytecodes the batch script runs per decision, line by
-- line, under Lua 5.1 outside Redis: redis.call is a small stand-in that
-- keeps strings and hashes in tables, so what is counted is the script's
-- own work, not Redis's commands. Run by main.go:
--
--   lua5.1 prof.lua SCRIPT SCENARIO SIZE CALLS LINES
local path, scenario, size, calls, shown = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4]), tonumber(arg[5])
local src = assert(io.open(path)):read('*a')
-- The script as a library keeps it: call defined once, called many times.
src = src:gsub('^#![^\n]*\n', ''):gsub('return call%(scriptKeys, scriptArgs%)%s*$', 'return call')

local clock, strings, hashes = 1767225600, {}, {}
local function printed(v)
  if type(v) == 'number' then
    return string.format('%.17g', v)
  end
  return v
end
local commands = {
  TIME = function()
    clock = clock + 1
    return {tostring(clock), '0'}
  end,
  GET = function(key)
    return strings[key] or false
  end,
  SET = function(key, value, ...)
    local nx, get = false, false
    for _, o in ipairs({...}) do
      nx, get = nx or o == 'NX', get or o == 'GET'
    end
    local old = strings[key]
    if not (nx and old ~= nil) then
      strings[key] = printed(value)
    end
    if get then
      return old or false
    end
    return {ok = 'OK'}
  end,
  HMGET = function(key, ...)
    local h, got = hashes[key] or {}, {}
    for i, f in ipairs({...}) do
      got[i] = h[f] or false
    end
    return got
  end,
  HSET = function(key, ...)
    local h, a = hashes[key] or {}, {...}
    hashes[key] = h
    for i = 1, #a, 2 do
      h[a[i]] = printed(a[i + 1])
    end
    return 1
  end,
  PEXPIRE = function() return 1 end,
  PEXPIREAT = function() return 1 end,
  PEXPIRETIME = function() return -1 end,
  DEL = function(key)
    strings[key], hashes[key] = nil, nil
    return 1
  end,
}
local function command(name, ...)
  return assert(commands[name:upper()], 'no stand-in for ' .. name)(...)
end
redis = {call = command, pcall = command}
local call = assert(loadstring(src, 'batch'))()

-- Each scenario is a batch of size requests on keys never seen: GCRA
-- (10 a second, burst 10), a fixed daily window (100,000), or a policy
-- of both, as scriptcost's fresh, second and policy2.
local serial = 0

-- oneLimit is the scenario of a batch under the one limit alg, rate,
-- period (µs), burst, on new keys named after prefix.
local function oneLimit(prefix, alg, rate, period, burst)
  return function(keys)
    for i = 1, size do
      serial = serial + 1
      keys[i] = prefix .. serial
    end
    return {'1', alg, rate, period, burst, '1', tostring(size), '1', '1', '0', '1', tostring(size), '1', '0', '0'}
  end
end

local batches = {
  fresh = oneLimit('g', 'gcra', '10', '1000000', '10'),
  second = oneLimit('f', 'fixed', '100000', '86400000000', '0'),
  policy2 = function(keys)
    for i = 1, size do
      serial = serial + 1
      keys[2 * i - 1], keys[2 * i] = 'g' .. serial, 'f' .. serial
    end
    return {'2', 'gcra', '10', '1000000', '10', 'fixed', '100000', '86400000000', '0', '0', '0', '1', tostring(size), '2', '1', '0', '1', '2', '0'}
  end,
}
local batch = assert(batches[scenario], 'no scenario ' .. scenario)
local function run()
  local keys = {}
  local args = batch(keys)
  return call(keys, args)
end
for _ = 1, 3 do
  run() -- the algorithm's first call defines it
end

local counts, total = {}, 0
debug.sethook(function()
  local info = debug.getinfo(2, 'Sl')
  if info.source == 'batch' then
    counts[info.currentline] = (counts[info.currentline] or 0) + 1
  end
  total = total + 1
end, '', 1)
for _ = 1, calls do
  run()
end
debug.sethook()

local lines = {}
for line in (src .. '\n'):gmatch('([^\n]*)\n') do
  lines[#lines + 1] = line
end
local order = {}
for l in pairs(counts) do
  order[#order + 1] = l
end
table.sort(order, function(a, b) return counts[a] > counts[b] end)
local decisions = calls * size
print(string.format('%s, %d a call: %.1f bytecodes a decision', scenario, size, total / decisions))
for i = 1, math.min(#order, shown) do
  local l = order[i]
  print(string.format('%7.2f  %s', counts[l] / decisions, lines[l]))
end
