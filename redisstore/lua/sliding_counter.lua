-- sliding_counter.lua: mirrors algo.Window.Sliding and SlidingAdjust.
-- State "start:cur:prev" in one string key.

local PPM = 1000000

-- The window holding now and its two counts, from the stored ones.
local function sc_shift(s0, cur, prev, now, len, offset)
  local start = window_start(now, len, offset, s0)
  if start == s0 then
    return start, cur, prev
  elseif start == s0 + len then
    return start, 0, cur
  end
  return start, 0, 0
end

-- The previous window's share of prev at elapsed µs into the current one:
-- ceil(prev * weight / PPM), the weight in parts per million of what the
-- window still covers, rounded up to whole ms (fdiv and cdiv inline, as
-- lib.lua explains).
local function sc_prev_share(len, prev, elapsed)
  if prev == 0 then
    return 0
  end
  if elapsed < 0 then
    elapsed = 0
  end
  local len_ms = len / 1000
  local left = (len_ms - (elapsed - elapsed % 1000) / 1000) * PPM
  local share = prev * ((left + (-left) % len_ms) / len_ms)
  return (share + (-share) % PPM) / PPM
end

local function sc_reset(len, start, cur, prev, now)
  if cur > 0 then
    return start + 2 * len - now
  elseif prev > 0 then
    return start + len - now
  end
  return 0
end

-- Earliest time in the window at start when cur + ceil(prev*weight) <= budget.
local function sc_fit_within(len, start, cur, prev, budget)
  if cur > budget then
    return nil
  end
  if prev == 0 then
    return start
  end
  local max_weight = fdiv((budget - cur) * PPM, prev)
  if max_weight >= PPM then
    return start
  end
  local len_ms = len / 1000
  local max_left_ms = fdiv(max_weight * len_ms, PPM)
  if max_left_ms < 1 then
    return nil
  end
  return start + (len_ms - max_left_ms) * 1000
end

local function sc_fit_at(len, start, cur, prev, budget)
  for _ = 1, 3 do
    local at = sc_fit_within(len, start, cur, prev, budget)
    if at then
      return at
    end
    start, cur, prev = start + len, 0, cur
  end
  return start
end

-- Decides a cost against the counter stored as v (the key's value, or nil).
local function sc_check(v, limit, len, offset, now, cost)
  -- sc_shift and parse3, written out.
  local start, cur, prev = now - (now - offset) % len, 0, 0
  if start < 0 then
    start = 0
  end
  if v then
    local c1 = string.find(v, ':', 1, true)
    local c2 = string.find(v, ':', c1 + 1, true)
    local s0 = tonumber(string.sub(v, 1, c1 - 1))
    if s0 >= start then
      start, cur, prev = s0, tonumber(string.sub(v, c1 + 1, c2 - 1)), tonumber(string.sub(v, c2 + 1))
    elseif s0 + len == start then
      prev = tonumber(string.sub(v, c1 + 1, c2 - 1))
    end
  end
  local est = cur + sc_prev_share(len, prev, now - start)
  -- A cost that fits (est >= 0, so it is within the limit too) charges.
  if cost > 0 and est + cost <= limit then
    cur = cur + cost
    return 1, 0, limit - est - cost, 0, sc_reset(len, start, cur, prev, now),
      string.format('%d:%d:%d', start, cur, prev)
  end
  local remaining, reset = math.max(0, limit - est), sc_reset(len, start, cur, prev, now)
  if cost > limit then
    return 0, 1, remaining, 0, reset
  end
  if cost == 0 then
    return 1, 0, remaining, 0, reset
  end
  return 0, 0, remaining, sc_fit_at(len, start, cur, prev, limit - cost) - now, reset
end

local function sc_adjust(key, limit, len, offset, now, at, delta, pad)
  local _, s0, c0, p0 = parse3(redis.call('GET', key))
  local start, cur, prev = sc_shift(s0, c0, p0, now, len, offset)
  local charged = window_start(at, len, offset, 0)
  if delta > 0 then
    cur = math.min(cur + delta, MAX_SLIDING_COUNT)
  elseif charged == start then
    cur = math.max(0, cur + delta)
  elseif charged == start - len then
    prev = math.max(0, prev + delta)
  end
  store(key, string.format('%d:%d:%d', start, cur, prev), sc_reset(len, start, cur, prev, now), pad)
end
