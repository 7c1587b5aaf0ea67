-- check_batch.lua: decides several independent checks in one call, in
-- order, each all or nothing as check.lua decides one: a batch shares one
-- call's fixed cost. ARGV[1]: TTL padding in ms; ARGV[2]: a MessagePack
-- array holding per check: now in µs or -1 for the server's TIME (read once
-- per call), the number of items n, and 5 values per item as in check.lua.
-- KEYS: every check's keys in order.
-- Reply: the server's time (0 if no check used it), then per check its
-- items' results as in check.lua (a check's decision time is the caller's
-- now or the server's time, which the caller knows).

local function check_batch(keys, argv)
  local pad = tonumber(argv[1])
  local p = cmsgpack.unpack(argv[2])
  local reply, server = { 0 }, nil
  local a, k, last = 0, 1, #p
  while a < last do
    local now = p[a + 1]
    if now < 0 then
      if not server then
        server = clock('')
        reply[1] = server
      end
      now = server
    end
    local n, alg = p[a + 2], p[a + 3]
    if n == 1 and alg ~= SLIDING_LOG then
      -- The common case written out: one item of a one-key algorithm.
      local key, cost, ok, big, rem, retry, reset, state = keys[k], p[a + 7]
      local v = redis.call('GET', key)
      if alg == FIXED_WINDOW then
        ok, big, rem, retry, reset, state = fw_check(v, p[a + 4], p[a + 5], p[a + 6], now, cost)
      elseif alg == SLIDING_COUNTER then
        ok, big, rem, retry, reset, state = sc_check(v, p[a + 4], p[a + 5], p[a + 6], now, cost)
      else
        ok, big, rem, retry, reset, state = tb_check(v, p[a + 4], p[a + 5], p[a + 6], now, cost)
      end
      if state then
        store(key, state, reset, pad)
      end
      local r = #reply
      if ok == 1 and big == 0 and retry == 0 then
        reply[r + 1], reply[r + 2] = -rem, reset
      else
        reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = 1 + ok + 2 * big, rem, retry, reset
      end
      k = k + 1
    else
      k = check_group(keys, p, reply, a + 2, n, k, now, pad)
    end
    a = a + 2 + 5 * n
  end
  return reply
end
