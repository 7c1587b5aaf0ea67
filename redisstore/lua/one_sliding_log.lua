-- one_sliding_log.lua: the one-item check of a sliding log (check.lua's
-- ARGV and reply for one item).
local function check_one_sliding_log(keys, argv)
  local now = clock(argv[1])
  local p = cmsgpack.unpack(argv[3])
  local len, cost = p[3], p[5]
  local ok, big, rem, retry, reset, state = sl_check(keys[1], keys[2], p[2], len, now, cost)
  if state then
    sl_charge(keys[1], keys[2], len, now, cost, tonumber(argv[2]))
  end
  if ok == 1 and big == 0 and retry == 0 then
    return { now, -rem, reset }
  end
  return { now, 1 + ok + 2 * big, rem, retry, reset }
end
