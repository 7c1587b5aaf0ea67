-- record.lua: reservation records (tokenlimit.Reserver), one string key
-- holding a MessagePack array:
--   { state, digest, at µs, expires µs, results, items }
-- results: 5 values per item (widen's form, lib.lua); items: per item
-- { algorithm, p1, p2, p3, cost, rule, key[, sum key] }. A settled record
-- drops its items; a tombstone is { TOMBSTONE, '', at, expires }. A record
-- is gone from expires on, in the store's time (the caller's in caller-time
-- mode); its Redis TTL, the same plus the padding, only reclaims memory.

-- Record states, and the statuses the scripts reply (tokenlimit's values).
local RECORD_RESERVED, RECORD_SETTLED, RECORD_TOMBSTONE = 1, 2, 3
local RESERVED, DENIED, REPLAYED, CONFLICT, CLOSED = 1, 2, 3, 4, 5
local SETTLED, ALREADY, UNKNOWN = 1, 2, 3
-- Settle rules (tokenlimit.SettleRule).
local SETTLE_KEEP, SETTLE_RELEASE, SETTLE_SPEND, SETTLE_MEASURE = 1, 2, 3, 4
local MAX_BUCKET_SPAN = 2251799813685248 -- 2^51, storekit.MaxBucketSpan

local function load_record(key, now)
  local raw = redis.call('GET', key)
  if not raw then
    return nil
  end
  local rec = cmsgpack.unpack(raw)
  if rec[4] <= now then
    redis.call('DEL', key)
    return nil
  end
  return rec
end

-- Writes rec, which expires at rec[4].
local function save_record(key, rec, now, pad)
  redis.call('SET', key, cmsgpack.pack(rec), 'PX', int(cdiv(rec[4] - now, 1000) + pad))
end

-- Appends to reply the answer to a reserve of an id that holds rec: the
-- recorded time, the status, then for a replay the recorded results in
-- put_result's form.
local function replay(reply, rec, digest)
  local r = #reply
  if rec[1] == RECORD_TOMBSTONE then
    reply[r + 1], reply[r + 2] = rec[3], CLOSED
    return
  elseif rec[2] ~= digest then
    reply[r + 1], reply[r + 2] = rec[3], CONFLICT
    return
  end
  reply[r + 1], reply[r + 2] = rec[3], REPLAYED
  local res = rec[5]
  r = r + 2
  for i = 1, #res, 5 do
    r = put_result(reply, r, res[i], res[i + 1], res[i + 2], res[i + 3], res[i + 4])
  end
end

-- storekit.SettleDelta: what settling a charge of cost applies.
local function settle_delta(alg, num, cost, settled)
  local delta = settled - cost
  if alg ~= FIXED_WINDOW and alg ~= SLIDING_LOG and alg ~= SLIDING_COUNTER then
    local bound = fdiv(MAX_BUCKET_SPAN, num)
    delta = math.max(-bound, math.min(bound, delta))
  end
  return delta
end

-- settle_record applies a settlement (actual, or cancel) to the record at
-- key, or writes a tombstone for ttl µs when there is none; forget deletes
-- the record instead of keeping it settled; spend, if not nil, is what
-- items under SETTLE_SPEND are set to, and measures[k + 1] what items
-- under SETTLE_MEASURE + k are set to (those beyond measures keep their
-- charge). Returns the status.
local function settle_record(key, now, pad, actual, cancel, ttl, forget, spend, measures)
  local rec = load_record(key, now)
  if not rec then
    save_record(key, { RECORD_TOMBSTONE, '', now, now + ttl }, now, pad)
    return UNKNOWN
  elseif rec[1] == RECORD_TOMBSTONE then
    return UNKNOWN
  elseif rec[1] == RECORD_SETTLED then
    return ALREADY
  end
  local at = rec[3]
  for _, it in ipairs(rec[6]) do
    local alg, p1, p2, p3, cost, rule = it[1], it[2], it[3], it[4], it[5], it[6]
    local settled = actual
    if cancel or rule == SETTLE_RELEASE then
      settled = 0
    elseif rule == SETTLE_KEEP or (rule == SETTLE_SPEND and not spend) then
      settled = cost
    elseif rule == SETTLE_SPEND then
      settled = spend
    elseif rule >= SETTLE_MEASURE then
      settled = measures[rule - SETTLE_MEASURE + 1] or cost
    end
    local delta = settle_delta(alg, p2, cost, settled)
    if delta ~= 0 then
      adjust_item(alg, it[7], it[8], p1, p2, p3, now, at, delta, pad)
    end
  end
  if forget then
    redis.call('DEL', key)
  else
    save_record(key, { RECORD_SETTLED, rec[2], at, rec[4], rec[5] }, now, pad)
  end
  return SETTLED
end
