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
local slotNames = {}

local function sliding(key, now, rate, period, precision, cost, peek)
  local limit, n = rate, max(precision, 1)
  if n > 100 or period % n ~= 0 then
    fail('invalid precision ' .. num(n) .. ': want 1 to 100 sub-windows of whole microseconds')
  end
  local s = period / n
  local names = slotNames[n]
  if not names then
    names = {'w', 'n'}
    for i = 0, n do
      names[i + 3] = tostring(i)
    end
    slotNames[n] = names
  end
  local st = redis.call('HMGET', key, unpack(names))
  local sw = int(st[1], key)
  local stored = int(st[2], key) == n
  -- fmod truncates like Go's %. A state from a later sub-window (the clock
  -- stepped back) keeps its sub-window.
  local w = now - math.fmod(now, s)
  if stored then
    w = max(w, sw)
  end
  local k = floor(w / s)
  -- counts[i] is the count of the i-th sub-window before the current one.
  local counts, full = {}, 0
  for i = 0, n do
    local c = 0
    if stored and w - i * s <= sw then
      c = int(st[3 + (k - i) % (n + 1)], key)
    end
    counts[i] = c
    if i < n then
      full = full + c
    end
  end
  local q, r = muldiv(counts[n], s - max(now - w, 0), s)
  if r > 0 then
    q = q + 1
  end
  local used = full + q
  local allowed = used + cost <= limit
  local retry, reset = 0, 0
  if allowed then
    counts[0] = counts[0] + cost
    used = used + cost
  else
    -- When the request fits: in the j-th sub-window from now, the
    -- sub-windows still inside count in full and the oldest by its share.
    local room = limit - cost
    retry = w + (n + 1) * s - now
    for j = 0, n do
      local left, oldest = room, counts[n - j]
      for i = 0, n - j - 1 do
        left = left - counts[i]
      end
      if left >= oldest then
        retry = max(w + j * s - now, 1)
        break
      elseif left >= 0 then
        local share = muldiv(left, s, oldest)
        retry = w + (j + 1) * s - share - now
        break
      end
    end
  end
  for i = 0, n do
    if counts[i] > 0 then
      reset = w + (n + 1 - i) * s - now
      break
    end
  end
  if allowed and not peek and cost > 0 then
    local args, m = {'w', w, 'n', n}, 4
    -- The sub-windows since the stored one change: all of them when the
    -- state is fresh, at most n+1.
    local changed = n
    if stored then
      changed = min(floor((w - sw) / s), n)
    end
    for i = 0, changed do
      args[m + 1], args[m + 2] = (k - i) % (n + 1), counts[i]
      m = m + 2
    end
    redis.call('HSET', key, unpack(args))
    expire(key, now, w + (n + 1) * s)
  end
  return allowed, limit, max(limit - used, 0), retry, reset, 0
end
