-- one_sliding_counter.lua: the one-item check of a sliding counter.
local function check_one_sliding_counter(keys, argv)
  return check_one(keys, argv, sc_check)
end
