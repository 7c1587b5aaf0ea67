-- sliding_log.lua: mirrors algo.Window's Trim, Decide and LogAdjust.
-- Two keys: a ZSET of entries (score: time in µs; member "seq:cost", unique
-- even within one µs) and a second key (rl:sls:...) holding "sum:seq".

local function sl_cost(member)
  return tonumber(string.match(member, ':(%-?%d+)$'))
end

-- The log's sum and last sequence number. If the sum key is gone but not
-- the log (evicted under maxmemory), both are rebuilt from the log, so sums
-- stay right and new members never collide with old ones.
local function sl_meta(zkey, mkey)
  local found, sum0, seq0 = parse2(redis.call('GET', mkey))
  if found then
    return sum0, seq0
  end
  local sum, seq = 0, 0
  for _, member in ipairs(redis.call('ZRANGE', zkey, 0, -1)) do
    sum = sum + sl_cost(member)
    seq = math.max(seq, tonumber(string.match(member, '^(%d+):')))
  end
  return sum, seq
end


-- Drops entries at or before now-len and returns the sum of the rest.
local function sl_trim(zkey, mkey, len, now)
  local sum, seq = sl_meta(zkey, mkey)
  if sum ~= 0 and redis.call('EXISTS', zkey) == 0 then
    -- The log is gone (evicted under maxmemory) but not its sum: the sum
    -- describes nothing any more.
    redis.call('DEL', mkey)
    return 0, seq
  end
  local horizon = now - len
  local gone = redis.call('ZRANGEBYSCORE', zkey, '-inf', int(horizon))
  if #gone > 0 then
    for _, member in ipairs(gone) do
      sum = sum - sl_cost(member)
    end
    redis.call('ZREMRANGEBYSCORE', zkey, '-inf', int(horizon))
    if redis.call('EXISTS', zkey) == 0 then
      redis.call('DEL', mkey)
    else
      -- The sum lives exactly as long as the log (it may have been rebuilt,
      -- with no TTL of its own yet).
      redis.call('SET', mkey, string.format('%d:%d', sum, seq), 'PX', redis.call('PTTL', zkey))
    end
  end
  return sum, seq
end

-- Time at which enough of the oldest entries have left for cost to fit;
-- walks the log in pages, checking only at the end of each group of entries
-- with the same time (they leave together).
local function sl_fit_at(zkey, limit, len, sum, count, cost)
  local page, from = 128, 0
  local last
  while true do
    local rows = redis.call('ZRANGE', zkey, from, from + page - 1, 'WITHSCORES')
    if #rows == 0 then
      return last + len
    end
    local nxt = redis.call('ZRANGE', zkey, from + page, from + page, 'WITHSCORES')
    for i = 1, #rows, 2 do
      local at = tonumber(rows[i + 1])
      sum = sum - sl_cost(rows[i])
      count = count - 1
      local following = rows[i + 3] or nxt[2]
      local group_ends = following == nil or tonumber(following) ~= at
      if group_ends and sum + cost <= limit and count < MAX_LOG_ENTRIES then
        return at + len
      end
      last = at
    end
    from = from + page
  end
end

local function sl_reset(zkey, len, now)
  local newest = redis.call('ZRANGE', zkey, -1, -1, 'WITHSCORES')
  if #newest == 0 then
    return 0
  end
  return tonumber(newest[2]) + len - now
end

local function sl_add(zkey, mkey, len, now, at, cost, sum, seq, pad)
  seq = seq + 1
  redis.call('ZADD', zkey, int(at), string.format('%d:%d', seq, cost))
  local ttl = sl_reset(zkey, len, now)
  local ms = int(cdiv(ttl, 1000) + pad)
  redis.call('PEXPIRE', zkey, ms)
  redis.call('SET', mkey, string.format('%d:%d', sum + cost, seq), 'PX', ms)
end

-- Returns allowed, toolarge, remaining, retry, reset, and (when allowed)
-- a state marker: the charge is made by sl_charge.
local function sl_check(zkey, mkey, limit, len, now, cost)
  local sum, seq = sl_trim(zkey, mkey, len, now)
  local count = redis.call('ZCARD', zkey)
  local remaining = math.max(0, limit - sum)
  if count >= MAX_LOG_ENTRIES then
    remaining = 0
  end
  local reset = sl_reset(zkey, len, now)
  if cost > limit then
    return 0, 1, remaining, 0, reset
  end
  if cost == 0 then
    return 1, 0, remaining, 0, reset
  end
  if sum + cost <= limit and count < MAX_LOG_ENTRIES then
    remaining = math.max(0, limit - sum - cost)
    if count + 1 >= MAX_LOG_ENTRIES then
      remaining = 0
    end
    return 1, 0, remaining, 0, math.max(reset, len), 'charge'
  end
  return 0, 0, remaining, sl_fit_at(zkey, limit, len, sum, count, cost) - now, reset
end

local function sl_charge(zkey, mkey, len, now, cost, pad)
  local sum, seq = sl_meta(zkey, mkey)
  sl_add(zkey, mkey, len, now, now, cost, sum, seq, pad)
end

-- The net cost the log holds at time at.
local function sl_held_at(zkey, at)
  local held = 0
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', zkey, int(at), int(at))) do
    held = held + sl_cost(member)
  end
  return held
end

local function sl_adjust(zkey, mkey, len, now, at, delta, pad)
  local sum, seq = sl_trim(zkey, mkey, len, now)
  if delta > 0 then
    sl_add(zkey, mkey, len, now, now, delta, sum, seq, pad)
    return
  end
  if at <= now - len then
    return
  end
  -- Never refund more than the log still holds for that charge (a log lost
  -- to a restart refunds nothing).
  local refund = math.min(-delta, sl_held_at(zkey, at))
  if refund <= 0 then
    return
  end
  sl_add(zkey, mkey, len, now, at, -refund, sum, seq, pad)
  if sum - refund == 0 then
    -- Every charge left is cancelled by its refund, at the same time: the
    -- entries can never matter again.
    redis.call('DEL', zkey, mkey)
  end
end
