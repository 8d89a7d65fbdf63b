-- GCRA as an application without Sluice would write it, with redis-cell's
-- semantics (CL.THROTTLE): one GET, arithmetic, one SET PX.
-- KEYS[1]: the key. ARGV: max_burst, count, period (seconds), quantity.
-- Replies {limited, limit, remaining, retry_after_s, reset_after_s}.
local burst, count, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local quantity = tonumber(ARGV[4]) or 1
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local interval = period * 1000000 / count
local tolerance = interval * (burst + 1)
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
  tat = now
end
local new_tat = tat + interval * quantity
local diff = now - (new_tat - tolerance)
if diff < 0 then
  return {1, burst + 1, 0, math.ceil(-diff / 1000000), math.ceil((tat - now) / 1000000)}
end
local ttl = new_tat - now
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil(ttl / 1000))
return {0, burst + 1, math.floor(diff / interval), -1, math.ceil(ttl / 1000000)}
