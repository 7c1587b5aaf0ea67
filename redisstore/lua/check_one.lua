-- check_one.lua: decides a single item of a one-key algorithm (the common
-- case); the one_*.lua files pass it their algorithm's check, so that each
-- one-item script holds only that algorithm's code. ARGV and the reply are
-- those of check.lua for one item.

local function check_one(keys, argv, decide_one)
  local now = clock(argv[1])
  local cost = tonumber(argv[7])
  local ok, big, rem, retry, reset, state =
    decide_one(keys[1], tonumber(argv[4]), tonumber(argv[5]), tonumber(argv[6]), now, cost)
  if state then
    store(keys[1], state, reset, tonumber(argv[2]))
  end
  return { now, ok, big, rem, retry, reset }
end
