-- check_one.lua: decides a single item (the common case) with only its own
-- algorithm's code in the script, so Redis builds fewer functions per call.
-- ARGV and the reply are those of check.lua for one item. ALGORITHM_CHECK
-- and ALGORITHM_COMMIT are defined by the file assembled before this one.

local now = clock(ARGV[1])
local cost = tonumber(ARGV[7])
local ok, big, rem, retry, reset, state =
  ALGORITHM_CHECK(KEYS, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), now, cost)
if ok == 1 and cost > 0 then
  ALGORITHM_COMMIT(KEYS, tonumber(ARGV[5]), now, cost, state, reset, tonumber(ARGV[2]))
end
return { now, ok, big, rem, retry, reset }
