-- reserve.lua: a reservation (tokenlimit.Reserver.Reserve): decides N items
-- all or nothing as check.lua does and, if all allow, charges them and
-- records the reservation in the same call.
-- KEYS[1]: the record; then the items' keys as in check.lua.
-- ARGV[1]: now µs or ""; ARGV[2]: TTL padding ms; ARGV[3]: the request's
-- digest; ARGV[4]: the record's TTL in µs; ARGV[5]: a MessagePack array of
-- 5 values per item as in check.lua, then each item's settle rule.
-- Reply: time µs, status, then per item its result as in check.lua (none
-- for a conflict or a tombstone).

-- reserve_one reserves the items whose numbers are p[a + 1 .. a + 5n],
-- with their rules at p[a + 5n + 1 .. a + 6n], its record at keys[k] and
-- the items' keys after it, at now. It returns the reply.
local function reserve_one(keys, k, p, a, n, digest, ttl, now, pad)
  local rec = load_record(keys[k], now)
  if rec then
    return replay(rec, digest)
  end
  local reply = { now, DENIED }
  check_group(keys, p, reply, a, n, k + 1, now, pad)
  local results, all = widen(reply, 2, n)
  if not all then
    return reply
  end
  reply[2] = RESERVED
  local items = {}
  local ik = k + 1
  for i = 1, n do
    local b = a + (i - 1) * 5
    local alg = p[b + 1]
    local it = { alg, p[b + 2], p[b + 3], p[b + 4], p[b + 5], p[a + 5 * n + i], keys[ik] }
    if alg == SLIDING_LOG then
      it[8] = keys[ik + 1]
    end
    items[i] = it
    ik = ik + key_count(alg)
  end
  save_record(keys[k], { RECORD_RESERVED, digest, now, now + ttl, results, items }, now, pad)
  return reply
end

local function reserve(keys, argv)
  local now = clock(argv[1])
  local p = cmsgpack.unpack(argv[5])
  return reserve_one(keys, 1, p, 0, #p / 6, argv[3], tonumber(argv[4]), now, tonumber(argv[2]))
end
