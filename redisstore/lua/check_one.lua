-- check_one.lua: decides a single item of a one-key algorithm (the common
-- case); the one_*.lua files pass it their algorithm's check, so that each
-- one-item script holds only that algorithm's code. ARGV and the reply are
-- those of check.lua for one item.

local function check_one(keys, argv, decide_one)
  local now = clock(argv[1])
  local p = cmsgpack.unpack(argv[3])
  local ok, big, rem, retry, reset, state = decide_one(redis.call('GET', keys[1]), p[2], p[3], p[4], now, p[5])
  if state then
    store(keys[1], state, reset, tonumber(argv[2]))
  end
  if ok == 1 and big == 0 and retry == 0 then
    return { now, -rem, reset }
  end
  return { now, 1 + ok + 2 * big, rem, retry, reset }
end
