-- check.lua: decides N items all or nothing (tokenlimit.Store.Check).
-- ARGV[1]: now in µs, or "" to read the server's TIME; ARGV[2]: TTL padding
-- in ms; ARGV[3]: the items' numbers, a MessagePack array of 5 per item:
-- algorithm, p1, p2, p3, cost, where p1..p3 are limit, window µs, offset µs
-- for the window algorithms and capacity, num, den for the buckets. KEYS:
-- one per item, two for a sliding log (log, sum).
-- Reply: now, then per item its result (put_result, lib.lua).

local function check(keys, argv)
  local now = clock(argv[1])
  local p = cmsgpack.unpack(argv[3])
  local reply = { now }
  check_group(keys, p, reply, 0, #p / 5, 1, now, tonumber(argv[2]))
  return reply
end
