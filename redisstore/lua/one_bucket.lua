-- one_bucket.lua: the one-item check of a token bucket or GCRA.
local function check_one_bucket(keys, argv)
  return check_one(keys, argv, tb_check)
end
