-- one_sliding_counter.lua: check_one.lua's hooks for a sliding counter.
local function ALGORITHM_CHECK(keys, limit, len, offset, now, cost)
  return sc_check(keys[1], limit, len, offset, now, cost)
end
local function ALGORITHM_COMMIT(keys, _, _, _, state, reset, pad)
  store(keys[1], state, reset, pad)
end
