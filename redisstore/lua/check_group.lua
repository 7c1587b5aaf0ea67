-- check_group.lua: decides one group of items all or nothing, the body of
-- tokenlimit.Store.Check, shared by check.lua (one group per check) and
-- reserve.lua. The group's n items have their 5 values each (algorithm,
-- p1, p2, p3, cost; see check.lua) in p, the call's unpacked numbers, from
-- index a + 1, or if by_ref 2 values each (where the item's limit's 4
-- values start in p, and its cost; see check.lua); their keys are in keys
-- from index k. It appends each item's result to reply (put_result's form)
-- and returns the index of the next group's first key. values, when not
-- nil, holds the keys' values as read before the call's first check, which
-- the group uses for every key not in written (batch_values, check.lua).

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

-- Writes the charge of an item that decide allowed (state is what it
-- returned; len is a sliding log's window).
local function charge(keys, k, alg, len, state, reset, now, cost, pad)
  if alg == SLIDING_LOG then
    sl_charge(keys[k], keys[k + 1], len, now, cost, pad)
  else
    store(keys[k], state, reset, pad)
  end
end

-- The charges a group of several items defers until every item is allowed:
-- 10 values per chargeable item (put_result's index, algorithm, key index,
-- p1, p2, p3, cost, state, reset, value). One table for every group,
-- emptied by overwriting: as a Redis Function it lasts as long as the
-- library's Lua state, so it is not grown anew for each group; check_group
-- never runs inside another.
local charges = {}

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
    local v = false
    if alg ~= SLIDING_LOG then
      if values and not written[keys[k]] then
        v = values[k]
      else
        v = redis.call('GET', keys[k])
      end
    end
    local ok, big, rem, retry, reset, state = decide(v, keys, k, alg, p1, p2, p3, now, cost)
    if state and n == 1 then
      charge(keys, k, alg, p2, state, reset, now, cost, pad)
    elseif state then
      charges[nc + 1], charges[nc + 2], charges[nc + 3], charges[nc + 4], charges[nc + 5] = r, alg, k, p1, p2
      charges[nc + 6], charges[nc + 7], charges[nc + 8], charges[nc + 9], charges[nc + 10] = p3, cost, state, reset, v
      nc = nc + 10
    end
    all = all and ok == 1
    r = put_result(reply, r, ok, big, rem, retry, reset)
    if alg == SLIDING_LOG then
      k = k + 2
    else
      k = k + 1
    end
  end
  for c = 1, nc, 10 do
    local alg, ck, p1, p2, p3, cost, v = charges[c + 1], charges[c + 2], charges[c + 3], charges[c + 4], charges[c + 5], charges[c + 6], charges[c + 9]
    if all then
      charge(keys, ck, alg, p2, charges[c + 7], charges[c + 8], now, cost, pad)
    else
      -- Nothing is charged: report the uncharged state of the items that
      -- would have fit (allowed, so in put_result's short form).
      local _, _, rem, _, reset = decide(v, keys, ck, alg, p1, p2, p3, now, 0)
      put_result(reply, charges[c], 1, 0, rem, 0, reset)
    end
  end
  return k
end
