-- settle.lua: settles the reservation recorded at KEYS[1]
-- (tokenlimit.Reserver.Settle): each item's settled cost minus its charge,
-- applied at the recorded charge time, and the record marked settled; or a
-- tombstone when there is no record, so that a late reserve charges nothing.
-- The items' keys are read from the record (they share its slot).
-- ARGV[1]: now µs or ""; ARGV[2]: TTL padding ms; ARGV[3]: actual;
-- ARGV[4]: "1" to cancel; ARGV[5]: the tombstone's TTL in µs; ARGV[6]: "1"
-- to delete the record once refunded (undoing a partial Cluster reserve);
-- ARGV[7]: the spend, or "" to keep what items under SETTLE_SPEND charged;
-- ARGV[8]: the measures, "m0,m1,..." or "" (see parse_measures).
-- Reply: now, status.

local function settle(keys, argv)
  local now = clock(argv[1])
  return { now, settle_record(keys[1], now, tonumber(argv[2]), tonumber(argv[3]), argv[4] == '1', tonumber(argv[5]), argv[6] == '1', tonumber(argv[7]),
    parse_measures(argv[8])) }
end
