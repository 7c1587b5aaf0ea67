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
  local reply, server = { 0 }, nil
  local values, written = batch_values(keys), {}
  local a, k, last = 1 + 4 * p[1], 1, #p
  while a < last do
    local now = p[a + 1]
    if now < 0 then
      if not server then
        server = clock('')
        reply[1] = server
      end
      now = server
    end
    local n = p[a + 2]
    local next_k = check_group(keys, p, reply, a + 2, n, k, now, pad, values, written, true)
    if values then
      for i = k, next_k - 1 do
        written[keys[i]] = true
      end
    end
    k = next_k
    a = a + 2 + 2 * n
  end
  return reply
end
