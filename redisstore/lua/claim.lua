-- claim.lua: on Redis Cluster, the pointer that finds a reservation's
-- records by id: { state, digest, at, expires, slots } at KEYS[1], in the
-- id's slot. ARGV[1]: now µs or ""; ARGV[2]: TTL padding ms; ARGV[3]:
-- "claim" (a reserve) or "settle"; ARGV[4]: the digest; ARGV[5]: the TTL in
-- µs; then the slots of the reservation's records.
-- Reply for claim: status (RESERVED: claimed now, REPLAYED: this request
-- already claimed it, CONFLICT, CLOSED: a tombstone); for settle: status
-- (SETTLED: here are the slots, UNKNOWN: a tombstone, written now if
-- there was nothing), then the slots.

local function claim(keys, argv)
  local now = clock(argv[1])
  local pad, digest, ttl = tonumber(argv[2]), argv[4], tonumber(argv[5])
  local p = load_record(keys[1], now)
  if argv[3] == 'claim' then
    if not p then
      local slots = {}
      for i = 6, #argv do
        slots[#slots + 1] = tonumber(argv[i])
      end
      save_record(keys[1], { RECORD_RESERVED, digest, now, now + ttl, slots }, now, pad)
      return { RESERVED }
    elseif p[1] == RECORD_TOMBSTONE then
      return { CLOSED }
    elseif p[2] ~= digest then
      return { CONFLICT }
    end
    return { REPLAYED }
  end
  if not p then
    save_record(keys[1], { RECORD_TOMBSTONE, '', now, now + ttl }, now, pad)
    return { UNKNOWN }
  elseif p[1] == RECORD_TOMBSTONE then
    return { UNKNOWN }
  end
  local reply = { SETTLED }
  for i, slot in ipairs(p[5]) do
    reply[i + 1] = slot
  end
  return reply
end
