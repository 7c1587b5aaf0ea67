-- check_group.lua: decides one group of items all or nothing, the body of
-- tokenlimit.Store.Check, shared by check.lua (one group per call),
-- check_batch.lua (many) and reserve.lua. The group's n items have their 5
-- values each (algorithm, p1, p2, p3, cost; see check.lua) in p, the
-- call's unpacked numbers, from index a + 1, or if by_ref 2 values each
-- (where the item's limit's 4 values start in p, and its cost; see
-- check_batch.lua); their keys are in keys from index k. It appends each
-- item's result to reply (put_result's form) and returns the index of the
-- next group's first key. values, when not nil, holds the keys' values as
-- read before the call's first check, which the group uses for every key
-- not in written (batch_values, check_batch.lua).

-- Decides an item; v is its key's value (nil: none) except for a sliding
-- log, which reads its own keys.
local function decide(v, keys, alg, k, p1, p2, p3, now, cost)
  if alg == FIXED_WINDOW then
    return fw_check(v, p1, p2, p3, now, cost)
  elseif alg == SLIDING_COUNTER then
    return sc_check(v, p1, p2, p3, now, cost)
  elseif alg == SLIDING_LOG then
    return sl_check(keys[k], keys[k + 1], p1, p2, now, cost)
  end
  return tb_check(v, p1, p2, p3, now, cost)
end

-- Charges an allowed item: state is what its check returned.
local function commit(keys, alg, k, len, now, cost, state, reset, pad)
  if alg == SLIDING_LOG then
    sl_charge(keys[k], keys[k + 1], len, now, cost, pad)
  else
    store(keys[k], state, reset, pad)
  end
end

local function check_group(keys, p, reply, a, n, k, now, pad, values, written, by_ref)
  local r = #reply
  -- Charges wait until every item allowed: 10 values per chargeable item.
  local charges, nc, all = {}, 0, true
  for _ = 1, n do
    local alg, p1, p2, p3, cost
    if by_ref then
      local l = p[a + 1]
      alg, p1, p2, p3, cost = p[l + 1], p[l + 2], p[l + 3], p[l + 4], p[a + 2]
      a = a + 2
    else
      alg, p1, p2, p3, cost = p[a + 1], p[a + 2], p[a + 3], p[a + 4], p[a + 5]
      a = a + 5
    end
    -- A sliding log reads its own keys.
    local v = false
    if alg ~= SLIDING_LOG then
      if values and not written[keys[k]] then
        v = values[k]
      else
        v = redis.call('GET', keys[k])
      end
    end
    local ok, big, rem, retry, reset, state = decide(v, keys, alg, k, p1, p2, p3, now, cost)
    local last = put_result(reply, r, ok, big, rem, retry, reset)
    all = all and ok == 1
    if state then
      charges[nc + 1], charges[nc + 2], charges[nc + 3], charges[nc + 4], charges[nc + 5] = r, alg, k, p1, p2
      charges[nc + 6], charges[nc + 7], charges[nc + 8], charges[nc + 9], charges[nc + 10] = p3, cost, state, reset, v
      nc = nc + 10
    end
    r = last
    k = k + key_count(alg)
  end
  for c = 1, nc, 10 do
    local cr, alg, ck, p1, p2, p3, cost, state, reset, v = unpack(charges, c, c + 9)
    if all then
      commit(keys, alg, ck, p2, now, cost, state, reset, pad)
    else
      -- Nothing is charged: report the uncharged state of the items that
      -- would have fit (remaining and reset, in whichever form
      -- put_result wrote them).
      local _, _, rem, _, rst = decide(v, keys, alg, ck, p1, p2, p3, now, 0)
      if reply[cr + 1] <= 0 then
        reply[cr + 1], reply[cr + 2] = -rem, rst
      else
        reply[cr + 2], reply[cr + 4] = rem, rst
      end
    end
  end
  return k
end
