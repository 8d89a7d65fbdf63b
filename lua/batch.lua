-- Decides many requests in one call, in order, each against its own key
-- with its own limit. One request's error (a key of the wrong type, a bad
-- argument) fails that request alone.
--
-- A key's requests come together, each key once in KEYS, so that a key
-- many requests share (a tenant-wide limit under load) is read once and
-- written once for all of them, each decided in turn against the state
-- the ones before it left (prelude.lua says how). Requests of different
-- keys are independent, so the caller may bring a key's requests together
-- from anywhere in its batch, keeping their order.
--
-- A batch's requests mostly share a few limits (a policy's), a cost of 1
-- and one request per key, so none of these comes per request: the limits
-- come once, in a table, and the requests and keys in runs that share
-- them. A batch of one policy on distinct keys is a few arguments and its
-- keys.
--
-- A multi-limit request (a policy of several limits, "10 a second and
-- 1,000 a day") is decided against all its limits at once: each looks
-- (a peek at the request's cost); if all admit and it is no peek, each is
-- charged; if any refuses, none is, and each limit with room reports what
-- it has (a look at cost 0). A charge is taken by each limit, whatever
-- the others, and a refund given back to each by its own anchor; a grant
-- is a take. Its keys are its own: no single-limit
-- request shares them, so they come after all the others. A key's
-- multi-limit requests come together too, so that those on the same keys
-- under the same limits (a hot tenant under a policy) are decided as a
-- hot run, reading and writing each limit's key once. Requests in a row
-- that share their limits, cost and mode (a batch under one policy) come
-- as one multi-limit run: their limits, cost and mode are sent once.
--
-- This comment is the format's one description; lua.BatchCall (wire.go)
-- encodes these arguments and lua.BatchReply decodes the reply, and
-- wire_test.go runs one through the other on a real Redis.
--
-- KEYS[i]  the i-th key: the single-limit requests' keys, then each
--          multi-limit request's, one per limit
-- ARGV     the number of limits, m; four fields per limit: algorithm
--          (fixed, log, sliding, token, leaky or gcra), rate, period (µs),
--          burst. The number of request runs, r; four fields per run: its
--          number of requests, its limit's index (1-based), its cost, and
--          mode: 0 takes, 1 peeks, 2 charges (see charge below), 3
--          grants, 4 refunds (see grant below). The number of key runs, g; two fields per run:
--          its number of keys and how many requests each key has. The
--          requests, in the order of the request runs, belong to the keys
--          in the order of the key runs. The number of multi-limit
--          runs, q: multi-limit requests in a row that share their limits,
--          cost and mode (a batch under one policy is one run); per run:
--          its number of requests c, their number of limits n, cost, mode
--          (as a run's), and the limits' indexes (n fields). Then the
--          refunds' anchors, one per single-limit refund, in the order
--          of the requests, then one per limit of each multi-limit
--          refund, a request at a time in the order of its limits: as
--          many as the runs' modes say, so a batch without a refund has
--          none. Then, for
--          tests only, an optional field: now (µs), which pins the
--          clock, otherwise Redis's TIME, read once for the batch. Last,
--          the deadline (µs on Redis's clock, 0: none): the time after
--          which the caller has answered the call's requests without it
--          (its failure mode). A call that Redis starts later is late: it
--          charges nothing and replies only its header. The caller
--          writes it as 17 digits, leading zeros and all, so that the
--          connection that sends the call can fill it in last.
--
-- Reply: a header of two integers: Redis's TIME (µs) as the call read
-- it, from which the caller keeps its offset to Redis's clock, and late
-- (1 or 0). Then five integers per single-limit request, in order, then five per
-- limit of each multi-limit request, a multi-limit run at a time, and
-- in a run a limit at a time: its first limit's reply to each of its
-- requests in order, then its second limit's, and so on (a limit's
-- replies to a run mostly repeat, where a request's one per limit do
-- not). Each reply is allowed (1 or 0), remaining,
-- retry_after (µs), reset_after (µs), delay (µs); except that where
-- requests in a row have the same allowed and the other four change by
-- the same steps (the empty keys of a run and a hot key's refusals
-- repeat a reply; a hot key's admissions count down), five integers
-- after the first reply, r >= 2 and the four steps, stand for r - 1 more
-- replies, each the one before plus the steps. Then the error messages,
-- each once. A request
-- that failed has, as allowed, -k, k the 1-based index of its message; a
-- multi-limit request that failed has it for each of its limits.
-- An admitted grant's reply carries the grant's hold (µs) as its
-- retry_after and its anchor (µs) as its delay, both otherwise 0 in an
-- admission (a grant is never a leaky bucket's): the caller, which knows
-- its grants, reads them there, and a reply is five integers whatever
-- the mode.
-- Redis writes each integer of a reply on its own; a batch of empty keys
-- replies five. The limit a decision reports is not sent: it follows from
-- the limit asked (engine's Limit.Capacity), and a smaller reply is less
-- for Redis to encode and for the caller to parse.
--
-- On Redis Cluster one call decides a master's part of a batch, keys of
-- many slots (the script's flag allow-cross-slot-keys lets it reach keys
-- it does not declare, and a call may declare only one slot's): it
-- declares none, and ARGV starts with the number of keys and the keys,
-- which then stand for KEYS. A key whose slot this node does not serve
-- (moved, or migrating and the key gone) fails its request alone with
-- Redis's "Script attempted to access a non local key" before anything
-- of it is written: every request reads all its keys before it writes.
-- The caller sends those requests again, alone, with declared keys, so
-- that Redis redirects them.
--
-- call, at the end, decides one batch. The functions it uses are defined
-- beside it: once for all calls in a library (lua.go), once a call in a
-- script. A call's state lives in the locals between them, which call
-- sets before anything reads them: a library keeps them from one FCALL to
-- the next, and a call that raised leaves them as they were. (Each call
-- used to build its twenty functions anew as closures of its own state:
-- about 100,000 instructions of Redis a call, as many as three fresh
-- decisions cost; scriptcost -callgrind -sizes 1.)

-- The call's keys and arguments, and its time (µs).
local KEYS, ARGV, now

-- count reads a count field at j.
local function count(j, what)
  local c = number(ARGV[j])
  if not c or c < 0 or c % 1 ~= 0 then
    fail('invalid ' .. what .. ' ' .. string.format('%q', tostring(ARGV[j])))
  end
  return c
end

-- limits are the call's m limits, each a table that prepare fills from
-- the limit's four fields: L.alg, L.rate, L.period, L.burst and what the
-- algorithm works out once (L.capacity, …), or L.err, why it is bad. A
-- batch's limits mostly repeat from call to call, so a library keeps each
-- limit as it was prepared, with its memo of a claim, for the next call
-- that sends the same four fields at the same place (L.f1 to L.f4).
local limits, m = {}, 0

local function prepare(L, j)
  L.rate, L.period, L.burst = limit(ARGV, j + 1)
  if L.alg then
    L.alg.prepare(L)
  end
end

-- limitAt is the call's l-th limit. Each algorithm is defined when a
-- limit first names it, into algorithms (see lua.go).
local function limitAt(l)
  local j = 2 + 4 * (l - 1)
  local f1, f2, f3, f4 = ARGV[j], ARGV[j + 1], ARGV[j + 2], ARGV[j + 3]
  local L = limits[l]
  if L and L.f1 == f1 and L.f2 == f2 and L.f3 == f3 and L.f4 == f4 then
    return L
  end
  local A = algorithms[f1]
  if A == nil and loaders[f1] then
    A = loaders[f1]()
    algorithms[f1] = A
  end
  L = {alg = A, f1 = f1, f2 = f2, f3 = f3, f4 = f4}
  local ok, err = pcall(prepare, L, j)
  if not ok then
    L.err = err
  elseif not A then
    L.err = {err = 'ERR sluice: unknown algorithm ' .. string.format('%q', f1)}
  end
  return L
end

-- limitOf is the limit a run names by its index, v: nil if it names none.
local function limitOf(v)
  local l = number(v)
  if l and l >= 1 and l <= m and l % 1 == 0 then
    return limits[l]
  end
end

-- memoOf is limit L's memo of a claim at cost: a claim worked out for one
-- empty key serves every empty key of the same limit and cost
-- (bucket.lua), in this call and the next.
local function memoOf(L, cost)
  local memo = L.memo
  if not memo or memo.cost ~= cost then
    memo = {cost = cost}
    L.memo = memo
  end
  return memo
end

-- The call's single-limit requests: n, in r runs; each run k, runs[k],
-- has sizes[k] requests and says run.L, run.A, run.cost, run.memo, and
-- whether they peek or charge, or run.err, why they all fail. The run
-- tables are kept from call to call, each filled afresh. The keys come in
-- g key runs, keyRuns[k] keys of perKey[k] requests each; keys is how many.
local n, r, g, keys = 0, 0, 0, 0
local sizes, runs, keyRuns, perKey = {}, {}, {}, {}

-- The call's multi-limit requests: q, in runsOfMulti runs; run k has
-- runSize[k] requests, of rN[k] limits each, cost rCost[k] and mode
-- rMode[k], rAt[k] is the field of its first limit index, and a refund
-- run's rAnchor[k] the field of its first request's first anchor: arrays,
-- kept from call to call. multiKeys counts their keys.
local q, runsOfMulti, multiKeys = 0, 0, 0
local runSize, rN, rCost, rMode, rAt, rAnchor = {}, {}, {}, {}, {}, {}

-- charge takes cost on s whatever is left: a cost known only after the
-- work (engine's charge, which this composes the same way). Whether it
-- fitted is a look at its cost before; it is then forced, as far as a
-- debt of one capacity; the reply is a look at cost 0 after it, and, when
-- it did not fit, the wait a request of cost 1 now has.
local function charge(A, s, key, now, L, cost)
  if A.charge then
    return A.charge(s, key, now, L, cost) -- its own way, unbounded (peer.lua)
  end
  local c = min(cost, 2 * L.capacity)
  local fitted = A.step(s, key, now, L, c, true)
  A.force(s, key, now, L, c)
  local _, remaining, retry, reset = A.step(s, key, now, L, 0, true, true) -- over: below zero, how far
  if fitted then
    retry = 0
  else
    _, _, retry = A.step(s, key, now, L, 1, true)
  end
  return fitted, remaining, retry, reset, 0
end

-- Owned quota (engine's grant.go): a grant takes cost as a take does
-- and hands the units to the caller, who spends them later; a refund
-- gives back what it did not spend, as far as that stays exact. Redis
-- keeps no record of a grant: its anchor names it (the window's end,
-- the sub-window's, the bucket's z after it, A.anchor), and the
-- algorithm's refund gives back by it (A.refund). Both read the key as
-- a look does, with no claim, whose reply could not carry the anchor,
-- and neither joins a hot run: a sidecar asks one grant of a key a
-- batch.
--
-- grant takes cost on s; admitted, its reply carries the hold in
-- retry_after and the anchor in delay.
local function grant(A, s, key, now, L, cost)
  local allowed, remaining, retry, reset, delay = A.step(s, key, now, L, cost, false)
  if allowed then
    delay = A.anchor(s, L)
    retry = delay - now
  end
  return allowed, remaining, retry, reset, delay
end

-- refund gives cost back to s by anchor; never refused, its reply is a
-- look at cost 0 after it.
local function refund(A, s, key, now, L, cost, anchor)
  A.refund(s, key, now, L, cost, anchor)
  local _, remaining, _, reset = A.step(s, key, now, L, 0, true)
  return true, remaining, 0, reset, 0
end

-- anchorAt reads the anchor in field j: a time after the epoch.
local function anchorAt(j)
  local a = number(ARGV[j])
  if not a or a < 1 or a % 1 ~= 0 or a >= two53 then
    fail('invalid anchor ' .. string.format('%q', tostring(ARGV[j])))
  end
  return a
end

-- out is the reply: o values, the header first. p1 to p5 are the last
-- reply, written there or standing for the end of the run after it, not
-- yet written: repeats more replies, each the one before with d2 to d5
-- added. errors are the messages, each once, at seen[message].
local out, o, repeats, p1, p2, p3, p4, p5, d2, d3, d4, d5
local errors, seen

-- emit replies to the next request.
local function emit(a, b, c, d, e)
  if a == p1 then
    local x2, x3, x4, x5 = b - p2, c - p3, d - p4, e - p5
    if repeats == 0 or (x2 == d2 and x3 == d3 and x4 == d4 and x5 == d5) then
      d2, d3, d4, d5, repeats = x2, x3, x4, x5, repeats + 1
      p2, p3, p4, p5 = b, c, d, e
      return
    end
  end
  if repeats > 0 then
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = repeats + 1, d2, d3, d4, d5
    o, repeats = o + 5, 0
  end
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = a, b, c, d, e
  o, p1, p2, p3, p4, p5 = o + 5, a, b, c, d, e
end

-- emitRun emits replies to the next m requests: the first a to e, each
-- next one with d2 to d5 added. Three are emitted one by one, which
-- leaves them the run in progress, stepping by d2 to d5; the rest only
-- lengthen it.
local function emitRun(m, a, b, c, d, e, x2, x3, x4, x5)
  for j = 0, min(m, 3) - 1 do
    emit(a, b + j * x2, c + j * x3, d + j * x4, e + j * x5)
  end
  if m > 3 then
    local more = m - 3
    repeats = repeats + more
    p2, p3, p4, p5 = p2 + more * x2, p3 + more * x3, p4 + more * x4, p5 + more * x5
  end
end

-- errorIndex is the 1-based index of an error's message, each once.
local function errorIndex(msg)
  -- redis.call and fail raise {err = message}; anything else a string.
  if type(msg) == 'table' then
    msg = msg.err
  end
  msg = tostring(msg)
  if not errors then
    errors, seen = {}, {}
  end
  local e = seen[msg]
  if not e then
    e = #errors + 1
    errors[e], seen[msg] = msg, e
  end
  return e
end

-- The single-limit requests. i is the request being decided, in request
-- run k, which has left requests after it; it belongs to the key
-- KEYS[ki], in key run kk, which has keysLeft keys after this one, and the
-- key has reqsLeft requests after it. s is the key's state while it is
-- read, under the limit L of algorithm A. decided decides from i on until
-- the end or a request's error, so that the batch pays for one pcall, not
-- one per request.
local i, k, left, ki, kk, keysLeft, reqsLeft = 1, 0, 0, 0, 0, 0, 0
local s, A, L
-- pending is what a claim of KEYS[pendingAt] got back: the key was not
-- empty, and read takes it from there without asking again.
local pending, pendingAt

-- flush writes the key's state, if a step changed it, and lets it go.
local function flush()
  local done = s
  s = nil
  if done.dirty then
    A.write(KEYS[ki], now, done, L)
  end
end

local function decided()
  while i <= n do
    while left == 0 do
      k = k + 1
      left = sizes[k]
    end
    if reqsLeft == 0 then
      while keysLeft == 0 do
        kk = kk + 1
        keysLeft = keyRuns[kk]
      end
      ki, keysLeft, reqsLeft = ki + 1, keysLeft - 1, perKey[kk]
    end
    left, reqsLeft = left - 1, reqsLeft - 1
    local run = runs[k]
    if run.err then
      error(run.err, 0)
    end
    -- A key asked under another limit is written under the one before,
    -- then read again under the new one.
    if s and L ~= run.L then
      flush()
    end
    local key = KEYS[ki]
    -- A take of one request a key under a limit that claims (bucket.lua)
    -- claims the empty keys of its run in a row, a command each. One
    -- request a key is the key run's (perKey), not reqsLeft == 0: a key
    -- whose first requests failed unread (a bad run) has no state yet at
    -- its last, and the keys after it have as many requests as it.
    local claimed = 0
    if run.claimRun and not s and perKey[kk] == 1 and pendingAt ~= ki then
      local span = keysLeft
      if left < span then
        span = left
      end
      claimed, pending = run.claimRun(KEYS, ki, ki + span, now, run.L, run.cost, run.memo)
      pendingAt = pending ~= nil and ki + claimed or nil
    end
    if claimed > 0 then
      local c = run.memo.claim
      emitRun(claimed, c[1] and 1 or 0, c[2], c[3], c[4], c[5], 0, 0, 0, 0)
      claimed = claimed - 1 -- request i and its key were counted above
      i, ki, left, keysLeft = i + 1 + claimed, ki + claimed, left - claimed, keysLeft - claimed
    else
      local allowed, remaining, retry, reset, delay
      if not s then
        if pinned then
          forget(key, now)
        end
        local got = pending
        if pendingAt ~= ki then
          got = nil
        end
        pending = nil
        -- A charge reads as a peek does: no claim, which would admit.
        s, allowed, remaining, retry, reset, delay = run.A.read(key, now, run.L, run.cost, run.look, run.memo, got)
        A, L = run.A, run.L
      end
      if allowed ~= nil then -- a claim decided it
      elseif not run.special then -- a take or a peek: one test for them
        allowed, remaining, retry, reset, delay = A.step(s, key, now, L, run.cost, run.peek)
      elseif run.charge then
        allowed, remaining, retry, reset, delay = charge(A, s, key, now, L, run.cost)
      elseif run.grant then
        allowed, remaining, retry, reset, delay = grant(A, s, key, now, L, run.cost)
      else -- a refund
        local a = anchorAt(run.anchors + sizes[k] - 1 - left) -- the request's place in its run
        allowed, remaining, retry, reset, delay = refund(A, s, key, now, L, run.cost, a)
      end
      emit(allowed and 1 or 0, remaining, retry, reset, delay)
      i = i + 1
      -- The key's next requests in this run may step alike: an algorithm
      -- that can tell (A.many) decides them at once, in a time that does
      -- not grow with their number.
      local more = reqsLeft
      if left < more then
        more = left
      end
      if more >= 4 and A.many and not run.special then
        local replies = A.many(s, key, now, L, run.cost, run.peek, more)
        if replies then
          for _, x in ipairs(replies) do
            emitRun(x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9], x[10])
          end
          i, left, reqsLeft = i + more, left - more, reqsLeft - more
        end
      end
      -- The key's state goes once its last request is decided, written if
      -- a step changed it.
      if reqsLeft == 0 then
        if s.dirty then
          flush()
        else
          s = nil
        end
      end
    end
  end
end

-- single decides the single-limit requests.
local function single()
  i, k, left, ki, kk, keysLeft, reqsLeft, s, A, L, pending, pendingAt = 1, 0, 0, 0, 0, 0, 0, nil, nil, nil, nil, nil
  while i <= n do
    local ok, msg = pcall(decided)
    if not ok then
      -- A bad limit or run fails all its requests with one message.
      emit(-errorIndex(msg), 0, 0, 0, 0)
      -- A step raises before it changes s, which stays the state before
      -- request i: the key's next request goes on from it, as it would
      -- after a request that failed alone.
      if s and reqsLeft == 0 then
        pcall(flush)
      end
      i = i + 1
    end
  end
end

-- The multi-limit requests. One pcall covers them all, as decided does
-- the single-limit ones: a request that fails raises, its limits reply
-- its error, and the loop goes on from the next. Nothing of a request is
-- written before every limit has looked.
--
-- pv holds the replies of the multi-limit run of the arguments being
-- decided, five values a limit, a request's after the one's before it:
-- request x's limit j's from pb + 5j - 4, pb being 5 nl times x's place
-- in its run (nl limits a request). One array kept from one run to the
-- next: no table per request or per limit. allowed is true or false, or
-- -k for a request that failed with the k-th message.
local pv, pb = {}, 0
-- Ls are the limits of the request being decided, lastAt the field of
-- the limit indexes they were resolved from and ownAlg whether each has
-- an algorithm of its own; states are their states. All are kept from
-- one request to the next: they are resolved at a multi-limit run's
-- first request (resolve), and a run whose limit indexes read as the
-- run before's (runs apart by cost or mode) takes them as they are; a
-- hot run's states are held in states (decideMulti), while a request
-- that does not continue a hot run comes after the one before wrote
-- them.
local Ls, states, lastAt, ownAlg = {}, {}, nil, true

-- x is the multi-limit request being decided, its keys after KEYS[base];
-- held and goesOn as decideMulti's. It is in the multi-limit run kr of
-- the arguments, of requests first to last.
local x, base, held, goesOn = 0, 0, false, false
local kr, first, last = 0, 1, 0

-- limitsOf resolves the limits of multi-limit run kr into Ls, and tells
-- whether each has an algorithm of its own.
local function limitsOf(kr)
  local at, nl = rAt[kr], rN[kr]
  if lastAt and #Ls == nl then
    local j = 0
    while j < nl and ARGV[at + j] == ARGV[lastAt + j] do
      j = j + 1
    end
    if j == nl then
      return ownAlg
    end
  end
  lastAt, ownAlg = nil, true
  for j = 1, nl do
    local L = limitOf(ARGV[at + j - 1])
    if not L then
      fail('no limit ' .. string.format('%q', ARGV[at + j - 1]))
    elseif L.err then
      error(L.err, 0)
    end
    for i = 1, j - 1 do
      if Ls[i].alg == L.alg then
        ownAlg = false
      end
    end
    Ls[j] = L
  end
  for j = nl + 1, #Ls do
    Ls[j] = nil
  end
  lastAt = at
  return ownAlg
end

-- writeHeld writes the states that steps changed, of the limits Ls of
-- the keys after KEYS[base].
local function writeHeld(base)
  for j = 1, #Ls do
    local s, L = states[j], Ls[j]
    if s.dirty then
      L.alg.write(KEYS[base + j], now, s, L)
    end
  end
end

-- A multi-limit run's requests share their limits, cost and mode, so
-- what follows from them is worked out once, at its first request
-- (resolve): cost, or costErr, the error of a bad one; limitsErr, the
-- error of a bad limit, else own, whether each limit has an algorithm
-- of its own (Ls holds them); claimer, the limit whose look claims an
-- empty key (see decideMulti), and memo, its memo of a claim at cost.
local cost, costErr, limitsErr, own, claimer, memo

-- decideMulti decides multi-limit request x, whose keys follow KEYS[base],
-- into pv. held is true when x continues a hot run (see below): states
-- hold the states its limits Ls were left in by the request before.
-- goesOn tells whether the hot run goes on after x: then it returns true,
-- to hold the states for the next request; otherwise it writes what the
-- hot run changed, and returns false.
local function decideMulti(base, nl, held, goesOn)
  if costErr then
    error(costErr, 0)
  end
  -- The upvalues used most, as locals: an upvalue costs an instruction
  -- each time it is read.
  local pv, pb, Ls, states, KEYS, now, mode = pv, pb, Ls, states, KEYS, now, rMode[kr]
  -- A charge is taken by each limit, whatever the others (engine's
  -- charge), and a refund given back to each by its own anchor (engine's
  -- refund): each limit is read, charged or given back and written in
  -- turn. Neither joins a hot run.
  local charged, at = mode == '2' and cost > 0, nil
  if charged then
    limitsOf(kr)
    for j = 1, nl do
      if not Ls[j].alg.force then
        fail('the sliding log takes no charge')
      end
    end
  elseif mode == '4' then
    if limitsErr then
      error(limitsErr, 0)
    end
    at = rAnchor[kr] + (x - first) * nl - 1 -- the field before the request's anchors
    for j = 1, nl do
      anchorAt(at + j) -- all checked before any is given back
    end
  end
  if charged or at then
    for j = 1, nl do
      local L, key = Ls[j], KEYS[base + j]
      if pinned then
        forget(key, now)
      end
      local s = L.alg.read(key, now, L, cost, true)
      local v = pb + 5 * j
      if at then
        pv[v - 4], pv[v - 3], pv[v - 2], pv[v - 1], pv[v] = refund(L.alg, s, key, now, L, cost, anchorAt(at + j))
      else
        pv[v - 4], pv[v - 3], pv[v - 2], pv[v - 1], pv[v] = charge(L.alg, s, key, now, L, cost)
      end
      if s.dirty then
        L.alg.write(key, now, s, L)
      end
    end
    return false
  end
  -- A hot run's limits are the same throughout, each its own algorithm.
  if not held and limitsErr then
    error(limitsErr, 0)
  end
  -- Each limit looks at the request's cost. An algorithm keeps one
  -- state at a time, so when every limit has an algorithm of its own
  -- (the usual policy: a burst and a quota) their states, all read, stay
  -- valid, and the charge (or the look at cost 0 after a refusal) goes on
  -- from them without reading again; otherwise each limit is read again.
  -- One limit that can claim an empty key (bucket.lua) looks last: where
  -- all the others admit, its look is a claim, one command that reads
  -- the key and, if it was empty, takes the cost from it, not a read and
  -- a write. A hot run writes its states once at its end: no claim there.
  local claimer = claimer
  if held or goesOn then
    claimer = 0
  end
  local refused, claimed = false, false
  for j = 1, nl do
    if j ~= claimer then
      local L, key, s = Ls[j], KEYS[base + j]
      local A = L.alg
      if held then
        s = states[j]
      else
        if pinned then
          forget(key, now)
        end
        s = A.read(key, now, L, cost, true)
        states[j] = s
      end
      local v = pb + 5 * j
      local allowed
      allowed, pv[v - 3], pv[v - 2], pv[v - 1], pv[v] = A.step(s, key, now, L, cost, true)
      pv[v - 4] = allowed
      refused = refused or not allowed
    end
  end
  if claimer > 0 then
    local L, key = Ls[claimer], KEYS[base + claimer]
    local A = L.alg
    if pinned then
      forget(key, now)
    end
    local v, s, allowed = pb + 5 * claimer
    if refused then
      s = A.read(key, now, L, cost, true)
    else
      s, allowed, pv[v - 3], pv[v - 2], pv[v - 1], pv[v] = A.read(key, now, L, cost, false, memo)
    end
    states[claimer] = s
    if allowed ~= nil then
      claimed = true -- taken and written
    else
      allowed, pv[v - 3], pv[v - 2], pv[v - 1], pv[v] = A.step(s, key, now, L, cost, true)
      refused = refused or not allowed
    end
    pv[v - 4] = allowed
  end
  if refused then
    -- Each limit with room reports what it has: a look at cost 0.
    for j = 1, nl do
      local v = pb + 5 * j
      if pv[v - 4] then
        local L, key, s = Ls[j], KEYS[base + j]
        if own then
          s = states[j]
        else
          if pinned then
            forget(key, now)
          end
          s = L.alg.read(key, now, L, 0, true)
        end
        pv[v - 4], pv[v - 3], pv[v - 2], pv[v - 1], pv[v] = L.alg.step(s, key, now, L, 0, true)
      end
    end
  elseif own and mode ~= '1' then
    -- Each limit takes the cost its look admitted: an algorithm that can
    -- (A.commit) stores what its look worked out, whose reply is the
    -- take's; the others step again. Unless a hot run goes on, each
    -- limit's state is written as soon as it is taken.
    for j = 1, nl do
      local L, s = Ls[j], states[j]
      local A = L.alg
      if not (claimed and j == claimer) then
        if A.commit and cost > 0 then
          A.commit(s)
        else
          local v = pb + 5 * j
          pv[v - 4], pv[v - 3], pv[v - 2], pv[v - 1], pv[v] = A.step(s, KEYS[base + j], now, L, cost, false)
        end
      end
      if mode == '3' then
        local v, a = pb + 5 * j, A.anchor(s, L) -- a grant: its hold and anchor (grant)
        pv[v - 2], pv[v] = a - now, a
      end
      if s.dirty and not goesOn then
        A.write(KEYS[base + j], now, s, L)
      end
    end
    return goesOn
  end
  if own then
    if goesOn then
      return true
    end
    for j = 1, nl do
      local s = states[j]
      if s.dirty then
        local L = Ls[j]
        L.alg.write(KEYS[base + j], now, s, L)
      end
    end
    return false
  end
  if refused or mode == '1' then
    return false
  end
  for j = 1, nl do
    local L, key, v = Ls[j], KEYS[base + j], pb + 5 * j
    local A = L.alg
    local s, allowed, remaining, retry, reset, delay
    if mode == '3' then
      s = A.read(key, now, L, cost, true)
      allowed, remaining, retry, reset, delay = grant(A, s, key, now, L, cost)
    else
      s, allowed, remaining, retry, reset, delay = A.read(key, now, L, cost, false, memoOf(L, cost))
    end
    if allowed == nil then
      allowed, remaining, retry, reset, delay = A.step(s, key, now, L, cost, false)
    end
    if s.dirty then
      A.write(key, now, s, L)
    end
    pv[v - 4], pv[v - 3], pv[v - 2], pv[v - 1], pv[v] = allowed, remaining, retry, reset, delay
  end
  return false
end

-- A hot run is multi-limit requests in a row on the same keys under the
-- same limits, each an algorithm of its own: a hot key under a policy,
-- whose requests the caller brings together. (A multi-limit run of the
-- arguments is requests that share limits, cost and mode, on any keys.)
-- The hot run's first request reads each limit's key; the others decide
-- against the states the one before left, and its last writes each key
-- once. A request that fails raises before it changes a state, so the
-- hot run goes on from the states before it; one that ends at a request
-- that failed writes those.
-- continues tells whether a request of run kx, its keys after
-- KEYS[base], continues the hot run of one of run ky, its keys after
-- KEYS[pbase].
local function continues(kx, base, ky, pbase)
  if rN[kx] ~= rN[ky] or rMode[kx] >= '2' or rMode[ky] >= '2' then -- charges, grants and refunds
    return false
  end
  for j = 0, rN[kx] - 1 do
    if KEYS[base + 1 + j] ~= KEYS[pbase + 1 + j] or ARGV[rAt[kx] + j] ~= ARGV[rAt[ky] + j] then
      return false
    end
  end
  return true
end

-- emitted replies to the run that x ends, from pv, a limit at a time:
-- its first limit's replies to each request in order, then its
-- second's. A limit's replies to a run's requests mostly step alike (a
-- burst limit on idle keys replies the same to each), so emit repeats
-- them, where a request's replies, one per limit, would not.
local function emitted()
  local pv, step = pv, 5 * rN[kr]
  local to = step * (x - first + 1)
  for v = 5, step, 5 do
    local w = v
    while w <= to do
      local a, b, c, d, e = pv[w - 4], pv[w - 3], pv[w - 2], pv[w - 1], pv[w]
      -- The next requests' replies that repeat this one (idle keys under
      -- a limit) are counted here and emitted as one run.
      local same = w + step
      while same <= to and pv[same] == e and pv[same - 1] == d and pv[same - 2] == c and pv[same - 3] == b and pv[same - 4] == a do
        same = same + step
      end
      a = a == true and 1 or a or 0
      if same > w + step then
        emitRun((same - w) / step, a, b, c, d, e, 0, 0, 0, 0)
      elseif a == p1 and repeats > 0 and b - p2 == d2 and c - p3 == d3 and d - p4 == d4 and e - p5 == d5 then
        -- emit's most usual case, a reply that lengthens the run of
        -- replies in progress, here.
        repeats, p2, p3, p4, p5 = repeats + 1, b, c, d, e
      else
        emit(a, b, c, d, e)
      end
      w = same
    end
  end
end

-- resolve works out what run kr shares (see decideMulti).
local function resolve()
  local got, err = checked(rCost[kr], 'cost')
  cost, costErr, limitsErr, claimer = got, err, nil, 0
  if err then
    return
  end
  local ok
  ok, got = pcall(limitsOf, kr)
  if not ok then
    limitsErr = got
    return
  end
  own = got
  local mode = rMode[kr]
  if mode == '3' or mode == '4' then
    for j = 1, rN[kr] do
      if not Ls[j].alg.refund then
        limitsErr = {err = 'ERR sluice: the ' .. Ls[j].f1 .. ' algorithm takes no grant'}
        return
      end
    end
    if cost < 1 then
      costErr = {err = 'ERR sluice: a grant or a refund of ' .. num(cost) .. ': want at least 1'}
    end
    return -- no claim: a claim's reply has no anchor
  end
  if own and mode ~= '1' and cost > 0 then
    for j = rN[kr], 1, -1 do
      if Ls[j].alg.claims and cost <= Ls[j].capacity then
        claimer, memo = j, memoOf(Ls[j], cost)
        break
      end
    end
  end
end

-- begun finds the run of x, which follows the one before (a run may
-- have no requests) and begins at x, and resolves it.
local function begun()
  while x > last do
    kr = kr + 1
    first, last = last + 1, last + runSize[kr]
  end
  resolve()
end

-- runOf is the multi-limit run of request y, x < y <= q.
local function runOf(y)
  local k = kr
  if y > last then
    k = k + 1
    while runSize[k] == 0 do
      k = k + 1
    end
  end
  return k
end

local function decidedMulti()
  while x < q do
    x = x + 1
    if x > last then
      begun()
    end
    local nl = rN[kr]
    pb = 5 * nl * (x - first)
    goesOn = x < q and KEYS[base + nl + 1] == KEYS[base + 1] and continues(runOf(x + 1), base + nl, kr, base)
    held = decideMulti(base, nl, held, goesOn)
    base = base + nl
    if x == last then
      emitted()
    end
  end
end

-- multi decides the multi-limit requests.
local function multi()
  x, base, held, goesOn, kr, first, last, lastAt = 0, keys, false, false, 0, 1, 0, nil
  while x < q do
    local ok, msg = pcall(decidedMulti)
    if not ok then
      local e = errorIndex(msg)
      for v = pb + 5, pb + 5 * rN[kr], 5 do
        pv[v - 4], pv[v - 3], pv[v - 2], pv[v - 1], pv[v] = -e, 0, 0, 0, 0
      end
      if held and not goesOn then
        pcall(writeHeld, base)
        held = false
      end
      base = base + rN[kr]
      if x == last then
        emitted()
      end
    end
  end
end

-- parse reads the call's arguments into the locals above, failing the
-- call on any that do not describe a batch.
local function parse()
  m = count(1, 'number of limits')
  if #ARGV < 2 + 4 * m then
    fail('want ' .. m .. ' limits of 4 arguments and a number of runs, got ' .. #ARGV .. ' arguments')
  end
  r = count(2 + 4 * m, 'number of runs')
  local gj = 3 + 4 * m + 4 * r -- the number of key runs' field
  if #ARGV < gj then
    fail('want ' .. m .. ' limits of 4 arguments, ' .. r .. ' runs of 4 and a number of key runs, got ' .. #ARGV .. ' arguments')
  end
  g = count(gj, 'number of key runs')
  local qj = gj + 2 * g + 1 -- the number of multi-limit runs' field
  if #ARGV < qj then
    fail('want ' .. m .. ' limits of 4 arguments, ' .. r .. ' runs of 4, ' .. g .. ' key runs of 2 and a number of multi-limit runs, got ' .. #ARGV .. ' arguments')
  end
  runsOfMulti = count(qj, 'number of multi-limit runs')
  local mj
  local multiAnchors = 0
  multiKeys, mj, q = 0, qj + 1, 0
  for k = 1, runsOfMulti do
    local c, nl = count(mj, 'multi-limit run size'), count(mj + 1, 'number of limits of a request')
    if nl < 1 or #ARGV < mj + 3 + nl then
      fail('multi-limit run ' .. k .. ' of ' .. nl .. ' limits cut short at argument ' .. #ARGV)
    end
    -- Checked before the loop: a run holds no more requests than keys.
    if multiKeys + c * nl > #KEYS then
      fail('multi-limit run ' .. k .. ' of ' .. c .. ' requests of ' .. nl .. ' limits past the ' .. #KEYS .. ' keys')
    end
    runSize[k], rN[k], rCost[k], rMode[k], rAt[k] = c, nl, ARGV[mj + 2], ARGV[mj + 3], mj + 4
    if rMode[k] == '4' then
      rAnchor[k], multiAnchors = multiAnchors, multiAnchors + c * nl -- from the anchors' start, fixed below
    end
    q, multiKeys, mj = q + c, multiKeys + c * nl, mj + 4 + nl
  end
  -- Each limit is read and checked once; one that is bad fails the
  -- requests that name it.
  for l = 1, m do
    limits[l] = limitAt(l)
  end
  -- Each run is read and checked once too: its size, its limit, its cost.
  -- The refunds' anchors follow the multi-limit runs (mj), the
  -- single-limit ones first.
  n = 0
  local anchors = 0
  for k = 1, r do
    local j = 3 + 4 * m + 4 * (k - 1)
    local size = count(j, 'run size')
    sizes[k], n = size, n + size
    local run = runs[k]
    if not run then
      run = {}
      runs[k] = run
    end
    local L = limitOf(ARGV[j + 1])
    local cost, err = checked(ARGV[j + 2], 'cost')
    local mode = ARGV[j + 3]
    run.L, run.A, run.cost, run.memo = L, L and L.alg, cost, nil
    run.peek, run.charge = mode == '1', mode == '2' and cost ~= nil and cost > 0
    run.grant, run.refund = mode == '3', mode == '4'
    run.special = run.charge or run.grant or run.refund -- none steps with many
    -- A charge, a grant and a refund read as a peek does: no claim,
    -- which would admit, or whose reply has no anchor.
    run.look = run.peek or run.special
    if run.refund then
      run.anchors, anchors = mj + anchors, anchors + size
    end
    if not L then
      err = {err = 'ERR sluice: no limit ' .. string.format('%q', ARGV[j + 1])}
    elseif L.err then
      err = L.err
    elseif not err and run.charge and not (L.alg.force or L.alg.charge) then
      err = {err = 'ERR sluice: the sliding log takes no charge'}
    elseif not err and (run.grant or run.refund) and not L.alg.refund then
      err = {err = 'ERR sluice: the ' .. L.f1 .. ' algorithm takes no grant'}
    elseif not err and (run.grant or run.refund) and cost < 1 then
      err = {err = 'ERR sluice: a grant or a refund of ' .. num(cost) .. ': want at least 1'}
    end
    run.err = err
    run.claimRun = nil
    if not err and not run.look then
      run.memo = memoOf(L, cost)
      if cost > 0 and cost <= L.capacity then
        run.claimRun = L.alg.claimRun
      end
    end
  end
  for k = 1, runsOfMulti do
    if rMode[k] == '4' then
      rAnchor[k] = mj + anchors + rAnchor[k]
    end
  end
  mj = mj + anchors + multiAnchors
  if #ARGV ~= mj and #ARGV ~= mj + 1 then
    local refunds = ''
    if anchors + multiAnchors > 0 then
      refunds = num(anchors + multiAnchors) .. ' anchors, '
    end
    fail('want ' .. m .. ' limits of 4 arguments, ' .. r .. ' runs of 4, ' .. g .. ' key runs of 2, ' .. runsOfMulti .. ' multi-limit runs, ' .. refunds .. 'an optional now and a deadline, got ' .. #ARGV .. ' arguments')
  end
  keys = 0
  local held = 0
  for k = 1, g do
    local j = gj + 2 * (k - 1)
    keyRuns[k], perKey[k] = count(j + 1, 'key run size'), count(j + 2, 'requests per key')
    if perKey[k] < 1 then
      fail('a key without requests')
    end
    keys, held = keys + keyRuns[k], held + keyRuns[k] * perKey[k]
  end
  if keys + multiKeys ~= #KEYS or held ~= n then
    fail('the runs hold ' .. n .. ' requests and the key runs ' .. held .. ' requests of ' .. keys .. ' keys, and the multi-limit requests ' .. multiKeys .. ' keys, for ' .. #KEYS .. ' keys')
  end
  return mj
end

-- call decides the batch of keys and args (KEYS and ARGV).
local function call(ks, args)
  KEYS, ARGV = ks, args
  begin()
  if #KEYS == 0 and #ARGV > 0 then
    -- unpack copies in C, where a loop would run bytecodes per key; Lua
    -- 5.1 unpacks at most a few thousand values at once.
    local nk = number(ARGV[1]) or 0
    if nk < 4000 and #ARGV < nk + 4000 then
      KEYS, ARGV = {unpack(ARGV, 2, nk + 1)}, {unpack(ARGV, nk + 2)}
    else
      local keys, args = {}, {}
      for j = 1, nk do
        keys[j] = ARGV[1 + j]
      end
      for j = nk + 2, #ARGV do
        args[j - nk - 1] = ARGV[j]
      end
      KEYS, ARGV = keys, args
    end
  end
  -- A late call stops here, before it reads or writes a key.
  local started = redisTime()
  if late(ARGV[#ARGV], started) then
    return {started, 1}
  end
  local mj = parse()
  now = clock(#ARGV == mj + 1 and ARGV[mj] or nil, started)
  out, o, repeats, p1, errors, seen = {started, 0}, 2, 0, nil, nil, nil
  if n > 0 then
    single()
  end
  if q > 0 then
    multi()
  end
  if repeats > 0 then
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = repeats + 1, d2, d3, d4, d5
    o = o + 5
  end
  if errors then
    for e = 1, #errors do
      out[o + e] = errors[e]
    end
  end
  return out
end
