-- Concurrency limiter: at most limit leases of a key held at once, each
-- ending by itself ttl after it was last acquired (engine/lease.go).
--
-- State: a sorted set, member = lease id, score = the lease's end (µs);
-- and one more member, '' (a lease id is never empty), whose score is
-- minus the most leases ever held at once since the key was created: the
-- high-water mark, which tests read to prove that the limit held across
-- sidecars (ZSCORE key ''). Leases that ended are dropped on every touch;
-- the key's TTL follows its last lease; with no lease left the key goes.
--
-- KEYS[1]  the key
-- ARGV     'acquire', limit, ttl (µs), id, deadline (µs) [, now (µs)]
--          'release', id [, now (µs)]
--
-- now is for tests only: it pins the clock, which otherwise is Redis's TIME.
-- deadline is on Redis's clock (0: none): the time after which the caller
-- has been answered without this call (its failure mode). An acquire that
-- Redis starts later takes no lease, which no one would hold or release,
-- and which would fill a slot until its ttl ran out; it replies the error
-- LATE. A release is not held to a deadline: freeing a lease late is
-- what its caller asked.
--
-- Reply to acquire: allowed (1 or 0), limit, remaining, retry_after (µs:
-- until the oldest lease ends, when refused), renewed (1 when id was held).
-- Reply to release: 1 if id was held, else 0.
local key, op = KEYS[1], ARGV[1]
local mark = ''

-- held drops the leases that ended and returns how many are held, and the
-- high-water mark.
local function held(now)
  redis.call('ZREMRANGEBYSCORE', key, 0, num(now))
  local top = tonumber(redis.call('ZSCORE', key, mark) or 0)
  local n = redis.call('ZCARD', key)
  if top ~= 0 then
    n = n - 1
  end
  return n, -top
end

-- follow gives the key the TTL of its last lease.
local function follow(now)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  expire(key, now, tonumber(last[2]))
end

local function id(v)
  if v == nil or v == '' then
    fail('invalid lease id: must not be empty')
  end
  return v
end

if op == 'acquire' then
  local limit, ttl, lease = param(ARGV[2], 'limit'), param(ARGV[3], 'lease_ttl'), id(ARGV[4])
  if limit < 1 or ttl < 1 then
    fail('limit and lease_ttl must be at least 1')
  end
  local started = redisTime()
  if late(ARGV[5], started) then
    return {err = 'LATE sluice: the acquire started after its deadline, and took no lease'}
  end
  local now = clock(ARGV[6], started)
  forget(key, now)
  local n, top = held(now)
  local renewed = redis.call('ZSCORE', key, lease) ~= false
  if renewed or n < limit then
    if not renewed then
      n = n + 1
    end
    redis.call('ZADD', key, now + ttl, lease)
    if n > top then
      redis.call('ZADD', key, -n, mark)
    end
    follow(now)
    return {1, limit, max(limit - n, 0), 0, renewed and 1 or 0}
  end
  local oldest = redis.call('ZRANGEBYSCORE', key, 0, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return {0, limit, 0, tonumber(oldest[2]) - now, 0}
elseif op == 'release' then
  local lease = id(ARGV[2])
  local now = clock(ARGV[3], redisTime())
  forget(key, now)
  local ends = redis.call('ZSCORE', key, lease)
  local n = held(now)
  if not ends or tonumber(ends) <= now then
    if n == 0 then
      redis.call('DEL', key)
    end
    return 0
  end
  redis.call('ZREM', key, lease)
  if n > 1 then
    follow(now)
  else
    -- The last lease: the key, and its high-water mark, end when the
    -- lease would have.
    expire(key, now, tonumber(ends))
  end
  return 1
end
fail('unknown lease operation ' .. string.format('%q', tostring(op)))
