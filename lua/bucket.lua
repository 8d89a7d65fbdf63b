-- The bucket: token bucket, leaky bucket and GCRA are one algorithm
-- (engine's bucket says why): a theoretical time z, when the bucket is full again, the queue
-- has drained, the next unit is due. A request of cost units moves it cost
-- intervals past max(z, now), and is admitted if that stays within
-- capacity intervals of now. The leaky bucket's request waits until
-- max(z, now) for its turn; GCRA is redis-cell's CL.THROTTLE, with
-- limit = burst + 1 and a delay variation tolerance of limit intervals.
--
-- The interval is exact: z carries the remainder of period / rate.
-- State: one value, z: its µs as a number while the remainder is 0 (the
-- form every interval of whole µs keeps), else the string 'µs f/d', z
-- being f/d µs past µs; engine's state a, b, c.

-- instant reads a stored z as µs and a remainder in 1/d µs; one written
-- under another rate is rescaled, rounded up, as engine's rescale does.
local function instant(v, key, d)
  if not v then
    return 0, 0
  end
  local a = tonumber(v)
  if a then
    return a, 0
  end
  local x, y, z = string.match(v, '^(%d+) (%d+)/(%d+)$')
  if not x then
    fail('key ' .. key .. ' holds ' .. string.format('%q', v) .. ', not a number')
  end
  local f, e
  a, f, e = tonumber(x), tonumber(y), tonumber(z)
  if f == 0 or e == d then
    return a, f
  end
  local q, r = muldiv(f, d, e)
  if r > 0 then
    q = q + 1
  end
  if q >= d then
    return a + 1, q - d
  end
  return a, q
end

-- stored is the value that keeps z.
local function stored(a, f, d)
  if f == 0 then
    return a
  end
  return num(a) .. ' ' .. num(f) .. '/' .. num(d)
end

-- legacyToken turns a token bucket that an earlier version kept as a hash
-- {used, last}, its interval rounded down to q µs, into its z, which is
-- last + used * q; a z already past leaves the key empty.
local function legacyToken(key, now, q)
  local st = redis.call('HMGET', key, 'used', 'last')
  local z = int(st[2], key) + int(st[1], key) * q
  redis.call('DEL', key)
  if z > now then
    redis.call('SET', key, z, px(now, z))
  end
end

local function bucket(key, now, rate, period, capacity, cost, peek, leaky, token)
  local q, r, d = interval(rate, period)
  local writes = not peek and cost > 0
  local ca, cf = times(cost, q, r, d)
  local fresh, ends, admit = stored(now + ca, cf, d), up(now + ca, cf), writes and cost <= capacity
  local ok, old, claimed = pcall(claim, key, now, fresh, ends, admit)
  if not ok then
    -- redis.call raises {err = message} or, in some versions, the message.
    local msg = type(old) == 'table' and old.err or old
    if not (token and string.find(tostring(msg), 'WRONGTYPE', 1, true)) then
      error(old, 0)
    end
    legacyToken(key, now, q)
    old, claimed = claim(key, now, fresh, ends, admit)
  end
  local sa, sf = instant(old, key, d)
  if sa < now then
    sa, sf = now, 0
  end
  local ea, ef = add(sa, sf, ca, cf, d)
  local ta, tf = times(capacity, q, r, d)
  local allowed = ea - now < ta or (ea - now == ta and ef <= tf)
  local la, lf, retry, delay = sa - now, sf, 0, 0
  if allowed then
    la, lf = ea - now, ef
    if leaky then
      delay = up(sa - now, sf)
    end
  else
    retry = up(sub(ea - now, ef, ta, tf, d))
  end
  -- A limit lowered on a live key can leave more in use than it allows.
  local remaining = 0
  if la < ta or (la == ta and lf <= tf) then
    local xa, xf = sub(ta, tf, la, lf, d)
    remaining = fit(xa, xf, period, d)
  end
  if allowed and writes and not claimed then
    redis.call('SET', key, stored(ea, ef, d), px(now, up(ea, ef)))
  end
  return allowed, capacity, remaining, retry, up(la, lf), delay
end
