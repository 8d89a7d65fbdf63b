-- Fixed window: one counter per window, windows aligned to the epoch.
-- State: a hash {w = window start (µs), n = count in it}; engine's state a, b.
local fixed = {}

function fixed.prepare(L)
  L.capacity = L.rate
end

-- s.a, s.b: w and n; s.ends: when the last change stops mattering.
local fixedState = {}

function fixed.read(key, now, L)
  local st = redis.call('HMGET', key, 'w', 'n')
  local s = fixedState
  s.a, s.b, s.dirty = int(st[1], key), int(st[2], key), false
  return s
end

function fixed.step(s, key, now, L, cost, peek, over)
  local p, limit = L.period, L.rate
  local a = s.a
  -- fmod truncates like Go's %, also for a time before the epoch. A state
  -- from a later window (the clock stepped back) keeps its window.
  local w = max(now - fmod(now, p), a)
  local n = 0
  if a == w then
    n = s.b
  end
  local e = w + p
  local allowed = n + cost <= limit
  local retry, reset = 0, 0
  if allowed then
    n = n + cost
  else
    retry = e - now
  end
  if n > 0 then
    reset = e - now
  end
  if allowed and cost > 0 then
    if peek then
      s.pa, s.pb, s.pends = w, n, e -- for commit
    else
      s.a, s.b, s.ends, s.dirty = w, n, e, true
    end
  end
  -- Below zero after a charge, or under a limit lowered on a live key:
  -- how far over the budget is, which only a charge's look (over) says.
  local remaining = limit - n
  if remaining < 0 and not over then
    remaining = 0
  end
  return allowed, remaining, retry, reset, 0
end

-- commit stores the outcome of the step before, a peek at a cost above
-- 0 that admitted, as its take would have: the take's reply is the
-- peek's, so a multi-limit request whose limits all admit takes each
-- without stepping again (batch.lua).
function fixed.commit(s)
  s.a, s.b, s.ends, s.dirty = s.pa, s.pb, s.pends, true
end

-- force takes c whatever is left (a charge, batch.lua), up to twice the
-- limit; a count already past that (a lowered limit) stays as it is.
function fixed.force(s, key, now, L, c)
  local p = L.period
  local w = max(now - fmod(now, p), s.a)
  local n = 0
  if s.a == w then
    n = s.b
  end
  local to = max(n, min(n + c, 2 * L.rate))
  if to ~= n then
    s.a, s.b, s.ends, s.dirty = w, to, w + p, true
  end
end

-- anchor is the anchor of a grant that a take just stored in s: the
-- window's end (engine's grantAnchor; batch.lua's grant).
function fixed.anchor(s, L)
  return s.a + L.period
end

-- refund takes cost off the count while the window that ends at anchor
-- is the current one, never below zero; after it, nothing (engine's
-- refund says why that is exact).
function fixed.refund(s, key, now, L, cost, anchor)
  local p = L.period
  local w = max(now - fmod(now, p), s.a)
  if s.a == w and anchor == w + p and s.b > 0 then
    s.b, s.ends, s.dirty = max(s.b - cost, 0), w + p, true
  end
end

function fixed.write(key, now, s)
  -- As strings: Redis would print each number with printf.
  redis.call('HSET', key, 'w', num(s.a), 'n', num(s.b))
  expire(key, now, s.ends)
end
