-- adjust.lua: applies N adjustments atomically (tokenlimit.Store.Adjust).
-- ARGV as in check.lua but with 6 values per item: algorithm, p1, p2, p3,
-- delta, charged-at µs. Reply: now.

local now = clock(ARGV[1])
local pad = tonumber(ARGV[2])
local n = (#ARGV - 2) / 6
local k = 1
for i = 1, n do
  local a = 2 + (i - 1) * 6
  local alg, p1, p2, p3, delta, at = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
    tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  if alg == FIXED_WINDOW then
    fw_adjust(KEYS[k], p1, p2, p3, now, at, delta, pad)
  elseif alg == SLIDING_COUNTER then
    sc_adjust(KEYS[k], p1, p2, p3, now, at, delta, pad)
  elseif alg == SLIDING_LOG then
    sl_adjust(KEYS[k], KEYS[k + 1], p2, now, at, delta, pad)
  else
    tb_adjust(KEYS[k], p1, p2, p3, now, delta, pad)
  end
  k = k + key_count(alg)
end
return { now }
