-- one_bucket.lua: check_one.lua's hooks for a token bucket or GCRA.
local function ALGORITHM_CHECK(keys, cap, num, den, now, cost)
  return tb_check(keys[1], cap, num, den, now, cost)
end
local function ALGORITHM_COMMIT(keys, _, _, _, state, reset, pad)
  store(keys[1], state, reset, pad)
end
