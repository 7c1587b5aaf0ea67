-- one_fixed_window.lua: the one-item check of a fixed window.
local function check_one_fixed_window(keys, argv)
  return check_one(keys, argv, fw_check)
end
