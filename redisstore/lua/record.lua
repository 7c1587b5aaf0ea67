-- record.lua: reservation records (tokenlimit.Reserver), one string key
-- holding a MessagePack array:
--   { state, digest, at µs, expires µs, results, items[, notes] }
-- results: 5 values per item (widen's form, lib.lua); items: per item
-- { algorithm, p1, p2, p3, cost, rule, key[, sum key] }; notes, when some
-- item has one: pairs of the item's index and its note. A settled record
-- drops its items and notes; a tombstone is { TOMBSTONE, '', at, expires }. A record
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

-- Appends note s to reply after reply[r]: its length, then its bytes, 6
-- per integer (exact in a Lua number), the last integer holding what is
-- left. Returns the index of the last value.
local function put_note(reply, r, s)
  r = r + 1
  reply[r] = #s
  for i = 1, #s, 6 do
    local v = 0
    for j = i, math.min(i + 5, #s) do
      v = v * 256 + string.byte(s, j)
    end
    r = r + 1
    reply[r] = v
  end
  return r
end

-- Appends to reply, after reply[r], the noted items of rec (a record just
-- settled, or nil for none): their number, then per item its note
-- (put_note), its recorded result (widen's 5 values) and its limit (p1).
-- Returns the index of the last value.
local function put_noted(reply, r, rec)
  local notes = rec and rec[7]
  if not notes then
    reply[r + 1] = 0
    return r + 1
  end
  reply[r + 1] = #notes / 2
  r = r + 1
  local res = rec[5]
  for j = 1, #notes, 2 do
    local i = notes[j]
    r = put_note(reply, r, notes[j + 1])
    local o = 5 * (i - 1)
    reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = res[o + 1], res[o + 2], res[o + 3], res[o + 4], res[o + 5]
    reply[r + 6] = rec[6][i][2]
    r = r + 6
  end
  return r
end

-- settle_record applies a settlement (actual, or cancel) to the record at
-- key, or writes a tombstone for ttl µs when there is none; forget deletes
-- the record instead of keeping it settled; spend, if not nil, is what
-- items under SETTLE_SPEND are set to, and measures[k + 1] what items
-- under SETTLE_MEASURE + k are set to (those beyond measures keep their
-- charge). Returns the status, and the record as it was when SETTLED.
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
  return SETTLED, rec
end
