-- adjust.lua: applies N adjustments atomically (tokenlimit.Store.Adjust).
-- ARGV as in check.lua but with 6 values per item: algorithm, p1, p2, p3,
-- delta, charged-at µs. Reply: now.

local now = clock(ARGV[1])
local pad = tonumber(ARGV[2])
local k = 1
for i = 1, (#ARGV - 2) / 6 do
  local a = 2 + (i - 1) * 6
  local alg = tonumber(ARGV[a + 1])
  adjust_item(alg, KEYS[k], KEYS[k + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]),
    now, tonumber(ARGV[a + 6]), tonumber(ARGV[a + 5]), pad)
  k = k + key_count(alg)
end
return { now }
