-- adjust.lua: applies N adjustments atomically (tokenlimit.Store.Adjust).
-- ARGV as in check.lua but with 6 values per item: algorithm, p1, p2, p3,
-- delta, charged-at µs. Reply: now.

local function adjust(keys, argv)
  local now = clock(argv[1])
  local pad = tonumber(argv[2])
  local k = 1
  for i = 1, (#argv - 2) / 6 do
    local a = 2 + (i - 1) * 6
    local alg = tonumber(argv[a + 1])
    adjust_item(alg, keys[k], keys[k + 1], tonumber(argv[a + 2]), tonumber(argv[a + 3]), tonumber(argv[a + 4]),
      now, tonumber(argv[a + 6]), tonumber(argv[a + 5]), pad)
    k = k + key_count(alg)
  end
  return { now }
end
