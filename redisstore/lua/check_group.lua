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

-- The charges a group defers until every item is allowed: 10 values per
-- chargeable item (put_result's index, algorithm, key index, p1, p2, p3,
-- cost, state, reset, value). One table for every group, emptied by
-- overwriting: as a Redis Function it lasts as long as the library's Lua
-- state, so it is not grown anew for each group; check_group never runs
-- inside another.
local charges = {}

-- The hot path is written out (the algorithm's dispatch, put_result,
-- key_count, the commit): a Lua call per item per step cost Redis more than
-- the code it ran. decide serves the rare path, a group with a denied item.
local function check_group(keys, p, reply, a, n, k, now, pad, values, written, by_ref)
  local r = #reply
  local nc, all = 0, true
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
    local key, v, ok, big, rem, retry, reset, state = keys[k], false
    if alg == SLIDING_LOG then
      -- A sliding log reads its own keys.
      ok, big, rem, retry, reset, state = sl_check(key, keys[k + 1], p1, p2, now, cost)
    else
      if values and not written[key] then
        v = values[k]
      else
        v = redis.call('GET', key)
      end
      if alg == FIXED_WINDOW then
        ok, big, rem, retry, reset, state = fw_check(v, p1, p2, p3, now, cost)
      elseif alg == SLIDING_COUNTER then
        ok, big, rem, retry, reset, state = sc_check(v, p1, p2, p3, now, cost)
      else
        ok, big, rem, retry, reset, state = tb_check(v, p1, p2, p3, now, cost)
      end
    end
    if state then
      charges[nc + 1], charges[nc + 2], charges[nc + 3], charges[nc + 4], charges[nc + 5] = r, alg, k, p1, p2
      charges[nc + 6], charges[nc + 7], charges[nc + 8], charges[nc + 9], charges[nc + 10] = p3, cost, state, reset, v
      nc = nc + 10
    end
    if ok == 1 and big == 0 and retry == 0 then
      reply[r + 1], reply[r + 2] = -rem, reset
      r = r + 2
    else
      reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = 1 + ok + 2 * big, rem, retry, reset
      r = r + 4
      all = all and ok == 1
    end
    if alg == SLIDING_LOG then
      k = k + 2
    else
      k = k + 1
    end
  end
  for c = 1, nc, 10 do
    local alg, ck = charges[c + 1], charges[c + 2]
    if all and alg == SLIDING_LOG then
      sl_charge(keys[ck], keys[ck + 1], charges[c + 4], now, charges[c + 6], pad)
    elseif all then
      store(keys[ck], charges[c + 7], charges[c + 8], pad)
    else
      -- Nothing is charged: report the uncharged state of the items that
      -- would have fit (remaining and reset, in whichever form
      -- put_result wrote them).
      local cr, p1, p2, p3, v = charges[c], charges[c + 3], charges[c + 4], charges[c + 5], charges[c + 9]
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
