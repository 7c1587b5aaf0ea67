-- fixed_window.lua: mirrors algo.Window.Fixed and FixedAdjust.
-- State "start:count" in one string key.

-- The window holding now and its count, from the stored start and count.
local function fw_current(s0, c0, now, len, offset)
  local start = window_start(now, len, offset, s0)
  if start ~= s0 then
    return start, 0
  end
  return s0, c0
end

local function fw_reset(count, finish, now)
  if count == 0 then
    return 0
  end
  return finish - now
end

-- Decides a cost against the window stored as v (the key's value, or nil).
-- Returns allowed, toolarge, remaining, retry, reset, and the state to store.
local function fw_check(v, limit, len, offset, now, cost)
  -- fw_current and parse2, written out.
  local start, count = now - (now - offset) % len, 0
  if start < 0 then
    start = 0
  end
  if v then
    local c = string.find(v, ':', 1, true)
    local s0 = tonumber(string.sub(v, 1, c - 1))
    if s0 >= start then
      start, count = s0, tonumber(string.sub(v, c + 1))
    end
  end
  local finish = start + len
  -- A cost that fits (count >= 0, so it is within the limit too) charges.
  if cost > 0 and count + cost <= limit then
    count = count + cost
    return 1, 0, limit - count, 0, finish - now, string.format('%d:%d', start, count)
  end
  local remaining, reset = math.max(0, limit - count), fw_reset(count, finish, now)
  if cost > limit then
    return 0, 1, remaining, 0, reset
  end
  if cost == 0 then
    return 1, 0, remaining, 0, reset
  end
  return 0, 0, remaining, finish - now, reset
end

local function fw_adjust(key, limit, len, offset, now, at, delta, pad)
  local _, s0, c0 = parse2(redis.call('GET', key))
  local start, count = fw_current(s0, c0, now, len, offset)
  if delta > 0 then
    count = math.min(count + delta, MAX_FIXED_COUNT)
  elseif window_start(at, len, offset, 0) == start then
    count = math.max(0, count + delta)
  end
  store(key, string.format('%d:%d', start, count), fw_reset(count, start + len, now), pad)
end
