-- Peer window: envoyproxy/ratelimit's fixed window in that service's own
-- keys, so that peer pods and Sluice pods share one count during a
-- rolling update (engine's peerWindow, engine/peer.go). The key is the
-- peer's, whole, window start included: the caller built it. State: a
-- plain integer, the count, as the peer's INCRBY keeps it; engine's b.
-- The limit's burst field carries the expiry's jitter, in seconds.
local peer = {}

function peer.prepare(L)
  L.capacity = L.rate
end

local peerState = {}

function peer.read(key, now, L)
  local s = peerState
  s.b, s.dirty = int(redis.call('GET', key), key), false
  return s
end

-- step takes cost when it fits and is no peek; retry and reset are the
-- caller's, who knows the window the key names.
function peer.step(s, key, now, L, cost, peek)
  local limit, n = L.rate, s.b
  local allowed = n + cost <= limit
  if not allowed then
    return false, max(limit - n, 0), 0, 0, 0 -- below zero only in a charge's reply
  end
  if not peek and cost > 0 then
    s.b, s.dirty = n + cost, true
  end
  return true, limit - n - cost, 0, 0, 0
end

-- charge takes cost whatever the count, as the peer's INCRBY does: no
-- bound on the debt (batch.lua's charge bounds the other algorithms').
function peer.charge(s, key, now, L, cost)
  local n = s.b + cost
  s.b, s.dirty = n, true
  return n <= L.rate, L.rate - n, 0, 0, 0
end

-- write stores the count with the peer's TTL: the period, plus a jitter
-- drawn in whole seconds below the limit's, as the peer's
-- Int63n(EXPIRATION_JITTER_MAX_SECONDS). On a pinned clock (tests) the
-- state ends after the period exactly, as engine's does.
function peer.write(key, now, s, L)
  local ends = now + L.period
  if L.burst > 0 and not pinned then
    ends = ends + math.random(0, L.burst - 1) * 1000000
  end
  redis.call('SET', key, num(s.b), px(now, ends))
end
