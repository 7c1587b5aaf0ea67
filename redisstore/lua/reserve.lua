-- reserve.lua: a reservation (tokenlimit.Reserver.Reserve): decides N items
-- all or nothing as check.lua does and, if all allow, charges them and
-- records the reservation in the same call.
-- KEYS[1]: the record; then the items' keys as in check.lua.
-- ARGV[1]: now µs or ""; ARGV[2]: TTL padding ms; ARGV[3]: the request's
-- digest; ARGV[4]: the record's TTL in µs; ARGV[5]: a MessagePack array of
-- 5 values per item as in check.lua, then each item's settle rule.
-- Reply: time µs, status, then per item the 5 values of check.lua (none
-- for a conflict or a tombstone).

local function reserve(keys, argv)
  local now = clock(argv[1])
  local pad, digest, ttl = tonumber(argv[2]), argv[3], tonumber(argv[4])
  local rec = load_record(keys[1], now)
  if rec then
    return replay(rec, digest)
  end
  local p = cmsgpack.unpack(argv[5])
  local n = #p / 6
  local reply = { now, DENIED }
  check_group(keys, p, reply, 0, n, 2, now, pad)
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
    local a = (i - 1) * 5
    local alg = p[a + 1]
    local it = { alg, p[a + 2], p[a + 3], p[a + 4], p[a + 5], p[5 * n + i], keys[k] }
    if alg == SLIDING_LOG then
      it[8] = keys[k + 1]
    end
    items[i] = it
    k = k + key_count(alg)
  end
  save_record(keys[1], { RECORD_RESERVED, digest, now, now + ttl, results, items }, now, pad)
  return reply
end
