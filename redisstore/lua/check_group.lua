-- check_group.lua: decides one group of items all or nothing, the body of
-- tokenlimit.Store.Check, shared by check.lua (one group per call) and
-- check_batch.lua (many). The group's n items have their 5 values each
-- (algorithm, p1, p2, p3, cost; see check.lua) in ARGV from index a + 1 and
-- their keys in KEYS from index k. It appends 5 values per item to reply
-- (allowed, toolarge, remaining, retry µs, reset µs) and returns the index
-- of the next group's first key.

local function decide(alg, k, p1, p2, p3, now, cost)
  if alg == FIXED_WINDOW then
    return fw_check(KEYS[k], p1, p2, p3, now, cost)
  elseif alg == SLIDING_COUNTER then
    return sc_check(KEYS[k], p1, p2, p3, now, cost)
  elseif alg == SLIDING_LOG then
    return sl_check(KEYS[k], KEYS[k + 1], p1, p2, now, cost)
  end
  return tb_check(KEYS[k], p1, p2, p3, now, cost)
end

local function check_group(reply, a, n, k, now, pad)
  local base, charges, all = #reply, {}, true
  for i = 1, n do
    local alg, p1, p2, p3, cost =
      tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
    a = a + 5
    local ok, big, rem, retry, reset, state = decide(alg, k, p1, p2, p3, now, cost)
    all = all and ok == 1
    if cost > 0 and state then
      charges[#charges + 1] = { i, alg, k, p1, p2, p3, cost, state, reset }
    end
    k = k + key_count(alg)
    local r = base + (i - 1) * 5
    reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = ok, big, rem, retry, reset
  end
  for _, c in ipairs(charges) do
    local i, alg, ck, p1, p2, p3, cost, state, reset = unpack(c)
    if not all then
      -- Nothing is charged: report the uncharged state of the items that
      -- would have fit.
      local r = base + (i - 1) * 5
      local _, _, rem, _, rst = decide(alg, ck, p1, p2, p3, now, 0)
      reply[r + 3], reply[r + 5] = rem, rst
    elseif alg == SLIDING_LOG then
      sl_charge(KEYS[ck], KEYS[ck + 1], p2, now, cost, pad)
    else
      store(KEYS[ck], state, reset, pad)
    end
  end
  return k
end
