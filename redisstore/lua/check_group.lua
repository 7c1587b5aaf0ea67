-- check_group.lua: decides one group of items all or nothing, the body of
-- tokenlimit.Store.Check, shared by check.lua (one group per check) and
-- reserve.lua (one per reservation). The group's n items have 2 values
-- each in p, the call's unpacked numbers, from index a + 1: where the
-- item's limit's 4 values start in p (the index before its algorithm's)
-- and its cost (see check.lua); their keys are in keys from index k. It
-- appends each item's result to reply (put_result's form) and returns the
-- index of the next group's first key. values, when not nil, holds the
-- keys' values as read before the call's first check, which the group uses
-- for every key not in written (batch_values, check.lua).

-- Decides an item: the one dispatch from an algorithm to its check. v is
-- its key's value (false: none) except for a sliding log, which reads its
-- own keys, keys[k] and keys[k + 1].
local function decide(v, keys, k, alg, p1, p2, p3, now, cost)
  if alg == FIXED_WINDOW then
    return fw_check(v, p1, p2, p3, now, cost)
  elseif alg == SLIDING_COUNTER then
    return sc_check(v, p1, p2, p3, now, cost)
  elseif alg == SLIDING_LOG then
    return sl_check(keys[k], keys[k + 1], p1, p2, now, cost)
  end
  return tb_check(v, p1, p2, p3, now, cost)
end

-- The charges a group defers until every item is allowed:
-- 10 values per chargeable item (put_result's index, algorithm, key index,
-- p1, p2, p3, cost, state, reset, value). One table for every group,
-- emptied by overwriting: as a Redis Function it lasts as long as the
-- library's Lua state, so it is not grown anew for each group; check_group
-- never runs inside another.
local charges = {}

local function check_group(keys, p, reply, a, n, k, now, pad, values, written)
  local r = #reply
  local nc, all = 0, true
  for _ = 1, n do
    local l = p[a + 1]
    local alg, p1, p2, p3, cost = p[l + 1], p[l + 2], p[l + 3], p[l + 4], p[a + 2]
    a = a + 2
    -- Written out: decide's dispatch, charge and put_result, copied for
    -- speed, as check.lua's one-item path is (a Lua call per item per step
    -- cost Redis more than the lines: BenchmarkBatchCall limits=3 under
    -- bench/redis-instructions.sh). decide serves the rare path, a group
    -- with a denied item.
    local key, v, ok, big, rem, retry, reset, state = keys[k], false
    if alg == SLIDING_LOG then
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
    local alg, ck, p1, p2, p3, cost, v = charges[c + 1], charges[c + 2], charges[c + 3], charges[c + 4], charges[c + 5], charges[c + 6], charges[c + 9]
    if all and alg == SLIDING_LOG then
      sl_charge(keys[ck], keys[ck + 1], p2, now, cost, pad)
    elseif all then
      store(keys[ck], charges[c + 7], charges[c + 8], pad)
    else
      -- Nothing is charged: report the uncharged state of the items that
      -- would have fit (allowed, so in put_result's short form).
      local _, _, rem, _, reset = decide(v, keys, ck, alg, p1, p2, p3, now, 0)
      put_result(reply, charges[c], 1, 0, rem, 0, reset)
    end
  end
  return k
end
