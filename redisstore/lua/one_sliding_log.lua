-- one_sliding_log.lua: check_one.lua's hooks for a sliding log.
local function ALGORITHM_CHECK(keys, limit, len, _, now, cost)
  return sl_check(keys[1], keys[2], limit, len, now, cost)
end
local function ALGORITHM_COMMIT(keys, len, now, cost, _, _, pad)
  sl_charge(keys[1], keys[2], len, now, cost, pad)
end
