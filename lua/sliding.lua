-- Sliding window counter: the period split into precision sub-windows
-- (1 unless asked), aligned to the epoch; the sub-windows wholly inside the
-- sliding period count in full, the oldest by the share of it the period
-- still covers, rounded up (engine's slidingWindow says what that bounds).
-- State: a hash {w = current sub-window start (µs), n = precision, and the
-- last n+1 sub-windows' counts, a ring under the fields '0' to n, indexed by
-- sub-window number modulo n+1}; engine's state a, b, log. A state kept
-- under another precision reads as empty.
--
-- The precision comes in the burst argument, which the windows take no
-- other use for; 0 means 1.
local sliding = {}

-- The HMGET field names for each precision.
local slotNames = {}

function sliding.prepare(L)
  local n = max(L.burst, 1)
  if n > 100 or L.period % n ~= 0 then
    fail('invalid precision ' .. num(n) .. ': want 1 to 100 sub-windows of whole microseconds')
  end
  local names = slotNames[n]
  if not names then
    names = {'w', 'n'}
    for i = 0, n do
      names[i + 3] = tostring(i)
    end
    slotNames[n] = names
  end
  L.capacity, L.n, L.s, L.names = L.rate, n, L.period / n, names
end

-- s.sw: the stored sub-window start; s.stored: the state is kept under
-- this precision; s.ring[j]: field j as read or since changed (read with
-- int only where used, as a field out of the window is never looked at);
-- s.changed[j]: field j must be written; s.ends: when the last change
-- stops mattering. counts is each step's scratch.
local slidingState = {ring = {}, changed = {}}
local counts = {}

function sliding.read(key, now, L)
  local n = L.n
  local st = redis.call('HMGET', key, unpack(L.names))
  local s = slidingState
  s.sw = int(st[1], key)
  s.stored = int(st[2], key) == n
  s.dirty = false
  local ring, changed = s.ring, s.changed
  for j = 0, n do
    ring[j], changed[j] = st[3 + j], false
  end
  return s
end

-- window reads s at now into counts: counts[i] is the count of the i-th
-- sub-window before the current one, which starts at w and is number k.
-- used is the estimate over the sliding period.
local function window(s, key, now, L)
  local n, sz = L.n, L.s
  local sw, stored, ring = s.sw, s.stored, s.ring
  -- fmod truncates like Go's %. A state from a later sub-window (the clock
  -- stepped back) keeps its sub-window.
  local w = now - fmod(now, sz)
  if stored then
    w = max(w, sw)
  end
  local k = floor(w / sz)
  local full = 0
  for i = 0, n do
    local c = 0
    if stored and w - i * sz <= sw then
      c = int(ring[(k - i) % (n + 1)], key)
    end
    counts[i] = c
    if i < n then
      full = full + c
    end
  end
  local q, r = muldiv(counts[n], sz - max(now - w, 0), sz)
  if r > 0 then
    q = q + 1
  end
  return w, k, full + q
end

-- keep stores counts in s as the state of sub-window w, number k.
local function keep(s, L, w, k)
  local n, sz = L.n, L.s
  -- The sub-windows since the stored one change: all of them when the
  -- state is fresh, at most n+1.
  local changed = n
  if s.stored then
    changed = min(floor((w - s.sw) / sz), n)
  end
  for i = 0, changed do
    local j = (k - i) % (n + 1)
    s.ring[j], s.changed[j] = counts[i], true
  end
  s.sw, s.stored, s.ends, s.dirty = w, true, w + (n + 1) * sz, true
end

function sliding.step(s, key, now, L, cost, peek, over)
  local limit, n, sz = L.rate, L.n, L.s
  local w, k, used = window(s, key, now, L)
  local allowed = used + cost <= limit
  local retry, reset = 0, 0
  if allowed then
    counts[0] = counts[0] + cost
    used = used + cost
  else
    -- When the request fits: in the j-th sub-window from now, the
    -- sub-windows still inside count in full and the oldest by its share.
    local room = limit - cost
    retry = w + (n + 1) * sz - now
    for j = 0, n do
      local left, oldest = room, counts[n - j]
      for i = 0, n - j - 1 do
        left = left - counts[i]
      end
      if left >= oldest then
        retry = max(w + j * sz - now, 1)
        break
      elseif left >= 0 then
        local share = muldiv(left, sz, oldest)
        retry = w + (j + 1) * sz - share - now
        break
      end
    end
  end
  for i = 0, n do
    if counts[i] > 0 then
      reset = w + (n + 1 - i) * sz - now
      break
    end
  end
  if allowed and not peek and cost > 0 then
    keep(s, L, w, k)
  end
  local remaining = limit - used -- below zero: over, as fixed's
  if remaining < 0 and not over then
    remaining = 0
  end
  return allowed, remaining, retry, reset, 0
end

-- force adds c to the current sub-window, as far as the estimate reaches
-- twice the limit (a charge, batch.lua).
function sliding.force(s, key, now, L, c)
  local w, k, used = window(s, key, now, L)
  local take = min(c, max(2 * L.rate - used, 0))
  if take > 0 then
    counts[0] = counts[0] + take
    keep(s, L, w, k)
  end
end

-- anchor is the anchor of a grant that a take just stored in s: the
-- current sub-window's end (engine's grantAnchor; batch.lua's grant).
function sliding.anchor(s, L)
  return s.sw + L.s
end

-- refund takes cost off the current sub-window's count while it is the
-- one that ends at anchor, never below zero; after it, nothing (engine's
-- refund).
function sliding.refund(s, key, now, L, cost, anchor)
  if not s.stored then
    return
  end
  local w, k = window(s, key, now, L)
  if anchor == w + L.s and counts[0] > 0 then
    counts[0] = max(counts[0] - cost, 0)
    keep(s, L, w, k)
  end
end

function sliding.write(key, now, s, L)
  local args, m = {'w', s.sw, 'n', L.n}, 4
  for j = 0, L.n do
    if s.changed[j] then
      args[m + 1], args[m + 2] = j, s.ring[j]
      m = m + 2
    end
  end
  redis.call('HSET', key, unpack(args))
  expire(key, now, s.ends)
end
