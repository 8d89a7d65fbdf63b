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

-- newBucket makes the algorithm: capacity is burst, plus one for GCRA
-- (extra); a leaky bucket's admitted request waits its turn; a token
-- bucket may still be kept in the legacy form. Everything is defined
-- inside it, so that a script defines it only when a call asks for one
-- of the three (see lua.go).
local function newBucket(extra, leaky, token)
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

  -- s.a, s.f: z; s.dirty: a step changed z since it was read.
  local s = {}

  -- again runs a command on key that failed with err, once a legacy
  -- token bucket, which answers WRONGTYPE, is turned into z; it raises
  -- any other error.
  local function again(err, key, now, L, ...)
    if not (token and string.find(tostring(err.err), 'WRONGTYPE', 1, true)) then
      error(err, 0)
    end
    legacyToken(key, now, L.q)
    return redis.call(...)
  end

  local function prepare(L)
    L.q, L.r, L.d = interval(L.rate, L.period)
    L.capacity = L.burst + extra
    L.ta, L.tf = times(L.capacity, L.q, L.r, L.d)
  end

  -- move is where a cost moves z: from max(z, now), sa and sf, to ea
  -- and ef (engine's bucketMove).
  local function move(s, now, L, cost)
    local sa, sf = s.a, s.f
    if sa < now then
      sa, sf = now, 0
    end
    local ca, cf = times(cost, L.q, L.r, L.d)
    return sa, sf, add(sa, sf, ca, cf, L.d)
  end

  local function step(s, key, now, L, cost, peek, over)
    local d, ta, tf = L.d, L.ta, L.tf
    local sa, sf, ea, ef = move(s, now, L, cost)
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
    local remaining
    if la < ta or (la == ta and lf <= tf) then
      local xa, xf = sub(ta, tf, la, lf, d)
      remaining = fit(xa, xf, L.period, d)
    elseif over then
      -- Over the budget, after a charge (or under a limit lowered on a
      -- live key): by the units still to refill before it is back at zero.
      local xa, xf = sub(la, lf, ta, tf, d)
      remaining = -fitUp(xa, xf, L.period, d)
    else
      remaining = 0
    end
    if allowed and cost > 0 then
      if peek then
        s.pa, s.pf = ea, ef -- for commit
      else
        s.a, s.f, s.dirty = ea, ef, true
      end
    end
    return allowed, remaining, retry, up(la, lf), delay
  end

  -- commit stores the outcome of the step before, a peek at a cost above
  -- 0 that admitted, as its take would have (fixed.lua says why).
  local function commit(s)
    s.a, s.f, s.dirty = s.pa, s.pf, true
  end

  -- Most keys are idle past their state's end, so when the first request
  -- would be admitted on an empty key, SET NX GET stores its outcome if
  -- the key is empty and otherwise returns what it holds without writing:
  -- an idle key costs one command, not a GET and a SET. What a claim
  -- stores and replies is the same for every empty key of a limit and
  -- cost at one now, so it is worked out once, into memo (the caller's,
  -- batch.lua's memoOf): the value and expiry as strings, which Redis
  -- takes as they are, and the request's decision, c[1] to c[5].
  local function claimOf(now, L, cost, memo)
    local c = memo.claim
    if not c or (c.made ~= now and (now <= 0 or c.made <= 0)) then
      s.a, s.f = 0, 0
      c = {step(s, nil, now, L, cost, false)}
      c.made, c.da, c.f = now, s.a - now, s.f
      memo.claim = c
    end
    -- An empty key's z, 0, lies before any now past the epoch, where its
    -- claim is the same at every now but for z itself, now plus c.da,
    -- and the value that stores it: kept from call to call (batch.lua),
    -- and those two worked out again at each now. The expiry is a span
    -- too, but on a pinned clock (prelude.lua).
    if c.now ~= now then
      c.now, c.a = now, now + c.da
      c.value = c.f > 0 and stored(c.a, c.f, L.d) or num(c.a)
      if pinned or c.opt ~= 'PX' then
        c.opt, c.at = px(now, up(c.a, c.f))
      end
    end
    return c
  end

  -- read reads key into s, claiming it when memo is given (and the cost
  -- fits): then it returns the claim's decision after s. got, when not
  -- nil, is what a claim of key just sent (claimRun) got back.
  local function read(key, now, L, cost, peek, memo, got)
    s.dirty = false
    if peek or cost == 0 or cost > L.capacity then
      local v = redis.pcall('GET', key)
      if type(v) == 'table' then
        v = again(v, key, now, L, 'GET', key)
      end
      s.a, s.f = instant(v, key, L.d)
      return s
    end
    local c = memo.claim
    if not c or c.now ~= now then
      c = claimOf(now, L, cost, memo)
    end
    local old = got
    if old == nil then
      old = redis.pcall('SET', key, c.value, 'NX', 'GET', c.opt, c.at)
    end
    if type(old) == 'table' then
      old = again(old, key, now, L, 'SET', key, c.value, 'NX', 'GET', c.opt, c.at)
    end
    s.dirty = false
    if not old then
      s.a, s.f = c.a, c.f
      return s, c[1], c[2], c[3], c[4], c[5]
    end
    s.a, s.f = instant(old, key, L.d)
    return s
  end

  -- claimRun claims keys[from] to keys[to] in turn while they are empty,
  -- each the one request of its key, all of one limit and cost that fits
  -- it, taking: a batch's idle keys cost a command each and nothing more.
  -- It returns how many it claimed, and what the first key it did not
  -- claim holds (or the error it raised), which read then takes as got;
  -- memo.claim is the decision of each key claimed.
  local function claimRun(keys, from, to, now, L, cost, memo)
    local c = claimOf(now, L, cost, memo)
    local value, opt, at, rpcall = c.value, c.opt, c.at, redis.pcall
    for j = from, to do
      local key = keys[j]
      if pinned then
        forget(key, now)
      end
      local old = rpcall('SET', key, value, 'NX', 'GET', opt, at)
      if old then
        return j - from, old
      end
    end
    return to - from + 1
  end

  -- force moves z c intervals past max(z, now), up to now + twice the
  -- capacity's intervals; a z already past that (a lowered limit) stays.
  local function force(s, key, now, L, c)
    local sa, sf, ea, ef = move(s, now, L, c)
    local ma, mf = times(2 * L.capacity, L.q, L.r, L.d)
    ma = ma + now
    if ma < ea or (ma == ea and mf < ef) then
      ea, ef = ma, mf
    end
    if sa < ea or (sa == ea and sf < ef) then
      s.a, s.f, s.dirty = ea, ef, true
    end
  end

  -- anchor is the anchor of a grant that a take just stored in s: z in
  -- whole µs, rounded down (engine's grantAnchor says why).
  local function anchor(s, L)
    return s.a
  end

  -- refund moves z back by the units of the grant anchored at anchor
  -- that have not refilled since, k = min(cost, ceil((anchor - now) /
  -- interval)), and never before now (engine's refund).
  local function refund(s, key, now, L, cost, anchor)
    local sa, sf, d = s.a, s.f, L.d
    if anchor > now and (now < sa or (now == sa and sf > 0)) then
      local ka, kf = times(min(cost, fitUp(anchor - now, 0, L.period, d)), L.q, L.r, d)
      local ta, tf = sub(sa, sf, ka, kf, d)
      if ta < now then
        ta, tf = now, 0
      end
      s.a, s.f, s.dirty = ta, tf, true
    end
  end

  -- write stores s, ending when the bucket is full again, and after now
  -- even when a refund gave it back to full at now (engine's refund).
  local function write(key, now, s, L)
    redis.call('SET', key, stored(s.a, s.f, L.d), px(now, max(up(s.a, s.f), now + 1)))
  end

  -- many decides the next m requests of cost on s, all at once, where
  -- they step alike: with an interval of whole µs and z with no fraction,
  -- each admission moves z, reset_after and a leaky bucket's delay on by
  -- cost intervals and remaining down by cost, and once one is refused
  -- the rest are refused alike, z unchanged. It returns up to two runs of
  -- replies, each {count, first reply, its steps}, or nil where the steps
  -- would not be alike (a peek, cost 0, a fraction).
  local function many(s, key, now, L, cost, peek, m)
    if peek or cost <= 0 or L.r ~= 0 or s.f ~= 0 then
      return nil
    end
    local c = cost * L.q
    local from = max(s.a, now)
    -- k admitted: each ends c past the one before, within capacity. The
    -- division is a float's: the checks after it make k exact.
    local k = min(max(floor((L.ta - (from - now)) / c), 0), m)
    while k > 0 and from + k * c - now > L.ta do
      k = k - 1
    end
    while k < m and from + (k + 1) * c - now <= L.ta do
      k = k + 1
    end
    local out = {}
    if k > 0 then
      local allowed, remaining, retry, reset, delay = step(s, key, now, L, cost, false)
      s.a = s.a + (k - 1) * c
      out[1] = {k, allowed and 1 or 0, remaining, retry, reset, delay, -cost, 0, c, leaky and c or 0}
    end
    if k < m then
      local allowed, remaining, retry, reset, delay = step(s, key, now, L, cost, false)
      out[#out + 1] = {m - k, allowed and 1 or 0, remaining, retry, reset, delay, 0, 0, 0, 0}
    end
    return out
  end

  -- claims: read may decide an empty key's request by claiming it. The
  -- leaky bucket takes no grant: its units hold places in its queue.
  local A = {prepare = prepare, read = read, step = step, commit = commit, write = write, many = many, force = force, claims = true, claimRun = claimRun}
  if not leaky then
    A.anchor, A.refund = anchor, refund
  end
  return A
end
