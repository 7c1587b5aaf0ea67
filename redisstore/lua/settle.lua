-- settle.lua: the settlement entry point (tokenlimit.Reserver.Settle):
-- settles several reservations in one call, in order, each as
-- settle_record (record.lua) does; a lone settlement is a call of one (the
-- common case), and settlements that queued together share one call's
-- fixed cost (records.go). The items' keys are read from each record
-- (they share its slot).
-- KEYS: each settlement's record. ARGV[1]: TTL padding in ms; ARGV[2]: a
-- MessagePack array of 7 values per settlement, then its measures: now in
-- µs or -1 for the server's TIME (read once per call), actual, the spend or
-- -1 to keep what items under SETTLE_SPEND charged, 1 to cancel (else 0),
-- 1 to delete the record once refunded (undoing a partial Cluster
-- reservation; else 0), the tombstone's TTL in µs, and the number of
-- measures m (tokenlimit.SettleRequest.Measures), followed by the m
-- measures.
-- Reply: per settlement its status, then its noted items (put_noted,
-- record.lua).

local function settle(keys, argv)
  local pad = tonumber(argv[1])
  local p = cmsgpack.unpack(argv[2])
  local reply, server, a, r = { nil, nil }, nil, 0, 0 -- sized for a lone settlement
  for i = 1, #keys do
    local now, spend, m = p[a + 1], p[a + 3], p[a + 7]
    now, server = packed_clock(now, server)
    if spend < 0 then
      spend = nil
    end
    local status, rec = settle_record(keys[i], now, pad, p[a + 2], p[a + 4] == 1, p[a + 6], p[a + 5] == 1, spend,
      { unpack(p, a + 8, a + 7 + m) })
    reply[r + 1] = status
    r = put_noted(reply, r + 1, rec)
    a = a + 7 + m
  end
  return reply
end
