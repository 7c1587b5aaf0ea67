-- reserve.lua: the reservation entry point (tokenlimit.Reserver.Reserve):
-- makes several independent reservations in one call, in order, each
-- deciding its items all or nothing as a check does (check_group) and, if
-- all allow, charging them and recording the reservation; a lone
-- reservation is a call of one (the common case), and reservations that
-- queued together share one call's fixed cost (records.go).
-- ARGV[1]: TTL padding in ms; ARGV[2]: a MessagePack array holding the
-- number of distinct limits m and their 4 values each, as check.lua's,
-- then per reservation: now in µs or -1 for the server's TIME (read once
-- per call), the number of items n, the record's TTL in µs, 2 values per
-- item as in check.lua (where its limit's values start, its cost), each
-- item's settle rule, then the number of noted items c and c pairs (the
-- item's index from 1, its note: a string); ARGV[3..]: each reservation's
-- digest.
-- KEYS: per reservation its record, then its items' keys as in check.lua.
-- Reply: per reservation its time (the recorded one for a replay), its
-- status, then, unless it is CONFLICT or CLOSED, its items' results
-- (put_result, lib.lua).

-- The record's items of a reservation of n items whose values start at
-- p[a + 1] and keys at keys[k] (see record.lua).
local function record_items(keys, p, a, n, k)
  local items = {}
  for i = 1, n do
    local l = p[a + 2 * i - 1]
    local alg = p[l + 1]
    local it = { alg, p[l + 2], p[l + 3], p[l + 4], p[a + 2 * i], p[a + 2 * n + i], keys[k] }
    if alg == SLIDING_LOG then
      it[8] = keys[k + 1]
    end
    items[i] = it
    k = k + key_count(alg)
  end
  return items
end

-- The index after the keys of n items whose values start at p[a + 1] and
-- keys at keys[k].
local function keys_after(p, a, n, k)
  for i = 1, n do
    k = k + key_count(p[p[a + 2 * i - 1] + 1])
  end
  return k
end

local function reserve(keys, argv)
  local pad = tonumber(argv[1])
  local p = cmsgpack.unpack(argv[2])
  -- Sized for a lone reservation of one item (at most 6 values), so that
  -- the common call never grows it.
  local reply, server = { nil, nil, nil, nil, nil, nil }, nil
  local a, k, j, last = 1 + 4 * p[1], 1, 2, #p
  while a < last do
    local now, n, ttl = p[a + 1], p[a + 2], p[a + 3]
    now, server = packed_clock(now, server)
    a, j = a + 3, j + 1
    local record, digest = keys[k], argv[j]
    local rec = load_record(record, now)
    if rec then
      replay(reply, rec, digest)
      k = keys_after(p, a, n, k + 1)
    else
      local r = #reply
      reply[r + 1], reply[r + 2] = now, DENIED
      local next_k = check_group(keys, p, reply, a, n, k + 1, now, pad)
      local results, all = widen(reply, r + 2, n)
      if all then
        reply[r + 2] = RESERVED
        local rec = { RECORD_RESERVED, digest, now, now + ttl, results, record_items(keys, p, a, n, k + 1) }
        local c = p[a + 3 * n + 1]
        if c > 0 then
          rec[7] = { unpack(p, a + 3 * n + 2, a + 3 * n + 1 + 2 * c) }
        end
        save_record(record, rec, now, pad)
      end
      k = next_k
    end
    a = a + 3 * n + 1 + 2 * p[a + 3 * n + 1]
  end
  return reply
end
