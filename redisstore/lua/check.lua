-- check.lua: the check entry point (tokenlimit.Store.Check): decides
-- several independent checks in one call, in order, each all or nothing; a
-- lone check is a call of one (the common case), and checks that queued
-- together share one call's fixed cost (batch.go). ARGV[1]: TTL padding in
-- ms; ARGV[2]: a MessagePack array holding the number of distinct limits m,
-- their 4 values each (algorithm, p1, p2, p3, where p1..p3 are limit,
-- window µs, offset µs for the window algorithms and capacity, num, den for
-- the buckets), then per check: now in µs or -1 for the server's TIME (read
-- once per call), the number of items n, and per item 2 values: where its
-- limit's values start in the array (the index before its algorithm's) and
-- its cost. Each limit is decoded once however many items share it. KEYS:
-- every check's keys in order, one per item, two for a sliding log (log,
-- sum).
-- Reply: the server's time (0 if no check used it), then per check its
-- items' results (put_result, lib.lua; a check's decision time is the
-- caller's now or the server's time, which the caller knows).
-- Every key's value is read up front in one call (batch_values); a key
-- that an earlier check wrote is read again, so each check sees the ones
-- before it.

-- The values of a call's keys read in one MGET (false for a key that holds
-- none, or not a string), or nil for a call of one key: one call instead
-- of a GET per check. A value read so is the key's before the call's first
-- check: a key that an earlier check of the call wrote is read again
-- (written). unpack puts every key on Lua's stack, which holds about
-- 8,000: a call has at most 2 * maxBatchItems keys (batch.go).
local function batch_values(keys)
  if #keys < 2 then
    return nil
  end
  return redis.call('MGET', unpack(keys))
end

local function check(keys, argv)
  local pad = tonumber(argv[1])
  local p = cmsgpack.unpack(argv[2])
  -- Sized for a lone check of one item (at most 5 values), so that the
  -- common call never grows it; # still counts the 1.
  local reply, server = { 0, nil, nil, nil, nil }, nil
  local values = batch_values(keys)
  local written = values and {} -- only read where values is
  local a, k, last = 1 + 4 * p[1], 1, #p
  while a < last do
    -- packed_clock (lib.lua) written out, for speed: through it a check
    -- in calls of 16 cost redis-server 1.2% more (29.5k instructions in
    -- the FCALL, 29.1k: BenchmarkBatchCall token_bucket/batch=16 under
    -- bench/redis-instructions.sh).
    local now = p[a + 1]
    if now < 0 then
      if not server then
        server = clock('')
        reply[1] = server
      end
      now = server
    end
    local n, l = p[a + 2], p[a + 3]
    local alg = p[l + 1]
    if n == 1 and alg ~= SLIDING_LOG then
      -- A check of one item of a one-key algorithm, the common case,
      -- written out: check_group's read, dispatch, charge and put_result,
      -- copied for speed. Through check_group it cost redis-server 81.2k
      -- instructions per lone check of a token bucket (67.2k before) and
      -- 38.2k per check in calls of 16 (32.9k): BenchmarkBatchCall
      -- token_bucket/lone and token_bucket/batch=16 under
      -- bench/redis-instructions.sh.
      local key, cost, ok, big, rem, retry, reset, state = keys[k], p[a + 4]
      local v
      if values and not written[key] then
        v = values[k]
      else
        v = redis.call('GET', key)
      end
      if alg == FIXED_WINDOW then
        ok, big, rem, retry, reset, state = fw_check(v, p[l + 2], p[l + 3], p[l + 4], now, cost)
      elseif alg == SLIDING_COUNTER then
        ok, big, rem, retry, reset, state = sc_check(v, p[l + 2], p[l + 3], p[l + 4], now, cost)
      else
        ok, big, rem, retry, reset, state = tb_check(v, p[l + 2], p[l + 3], p[l + 4], now, cost)
      end
      if state then
        store(key, state, reset, pad)
        if values then
          written[key] = true
        end
      end
      local r = #reply
      if ok == 1 and big == 0 and retry == 0 then
        reply[r + 1], reply[r + 2] = -rem, reset
      else
        reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = 1 + ok + 2 * big, rem, retry, reset
      end
      k = k + 1
    else
      local next_k = check_group(keys, p, reply, a + 2, n, k, now, pad, values, written)
      if values then
        for i = k, next_k - 1 do
          written[keys[i]] = true
        end
      end
      k = next_k
    end
    a = a + 2 + 2 * n
  end
  return reply
end
