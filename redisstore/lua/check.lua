-- check.lua: decides N items all or nothing (tokenlimit.Store.Check).
-- ARGV[1]: now in µs, or "" to read the server's TIME; ARGV[2]: TTL padding
-- in ms; then 5 values per item: algorithm, p1, p2, p3, cost, where p1..p3
-- are limit, window µs, offset µs for the window algorithms and capacity, num, den
-- for the buckets. KEYS: one per item, two for a sliding log (log, sum).
-- Reply: now, then per item allowed, toolarge, remaining, retry µs, reset µs.

local now = clock(ARGV[1])
local pad = tonumber(ARGV[2])

local function decide(alg, k, p1, p2, p3, cost)
  if alg == FIXED_WINDOW then
    return fw_check(KEYS[k], p1, p2, p3, now, cost)
  elseif alg == SLIDING_COUNTER then
    return sc_check(KEYS[k], p1, p2, p3, now, cost)
  elseif alg == SLIDING_LOG then
    return sl_check(KEYS[k], KEYS[k + 1], p1, p2, now, cost)
  end
  return tb_check(KEYS[k], p1, p2, p3, now, cost)
end

local reply, charges, all = { now }, {}, true
local k = 1
for i = 1, (#ARGV - 2) / 5 do
  local a = 2 + (i - 1) * 5
  local alg, p1, p2, p3, cost =
    tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local ok, big, rem, retry, reset, state = decide(alg, k, p1, p2, p3, cost)
  all = all and ok == 1
  if cost > 0 and state then
    charges[#charges + 1] = { i, alg, k, p1, p2, p3, cost, state, reset }
  end
  k = k + key_count(alg)
  local r = 1 + (i - 1) * 5
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = ok, big, rem, retry, reset
end

for _, c in ipairs(charges) do
  local i, alg, k, p1, p2, p3, cost, state, reset = unpack(c)
  if not all then
    -- Nothing is charged: report the uncharged state of the items that
    -- would have fit.
    local r = 1 + (i - 1) * 5
    local _, _, rem, _, rst = decide(alg, k, p1, p2, p3, 0)
    reply[r + 3], reply[r + 5] = rem, rst
  elseif alg == SLIDING_LOG then
    sl_charge(KEYS[k], KEYS[k + 1], p2, now, cost, pad)
  else
    store(KEYS[k], state, reset, pad)
  end
end
return reply
