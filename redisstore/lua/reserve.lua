-- reserve.lua: a reservation (tokenlimit.Reserver.Reserve): decides N items
-- all or nothing as check.lua does and, if all allow, charges them and
-- records the reservation in the same call.
-- KEYS[1]: the record; then the items' keys as in check.lua.
-- ARGV[1]: now µs or ""; ARGV[2]: TTL padding ms; ARGV[3]: the request's
-- digest; ARGV[4]: the record's TTL in µs; then 5 values per item as in
-- check.lua; then each item's settle rule.
-- Reply: time µs, status, then per item the 5 values of check.lua (none
-- for a conflict or a tombstone).

local now = clock(ARGV[1])
local pad, digest, ttl = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local rec = load_record(KEYS[1], now)
if rec then
  return replay(rec, digest)
end
local n = (#ARGV - 4) / 6
local reply = { now, DENIED }
check_group(reply, 4, n, 2, now, pad)
for i = 1, n do
  if reply[3 + (i - 1) * 5] ~= 1 then
    return reply
  end
end
reply[2] = RESERVED
local results, items = {}, {}
for i = 3, #reply do
  results[i - 2] = reply[i]
end
local k = 2
for i = 1, n do
  local a = 4 + (i - 1) * 5
  local alg = tonumber(ARGV[a + 1])
  local it = { alg, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]),
    tonumber(ARGV[4 + 5 * n + i]), KEYS[k] }
  if alg == SLIDING_LOG then
    it[8] = KEYS[k + 1]
  end
  items[i] = it
  k = k + key_count(alg)
end
save_record(KEYS[1], { RECORD_RESERVED, digest, now, now + ttl, results, items }, now, pad)
return reply
