-- settle.lua: settles the reservation recorded at KEYS[1]
-- (tokenlimit.Reserver.Settle): each item's settled cost minus its charge,
-- applied at the recorded charge time, and the record marked settled; or a
-- tombstone when there is no record, so that a late reserve charges nothing.
-- The items' keys are read from the record (they share its slot).
-- ARGV[1]: now µs or ""; ARGV[2]: TTL padding ms; ARGV[3]: actual;
-- ARGV[4]: "1" to cancel; ARGV[5]: the tombstone's TTL in µs; ARGV[6]: "1"
-- to delete the record once refunded (undoing a partial Cluster reserve);
-- ARGV[7]: the spend, or "" to keep what items under SETTLE_SPEND charged.
-- Reply: now, status.

local now = clock(ARGV[1])
return { now, settle_record(KEYS[1], now, tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1', tonumber(ARGV[5]), ARGV[6] == '1', tonumber(ARGV[7])) }
