-- bucket.lua: the token bucket and GCRA; mirrors algo.Bucket.
-- State: the theoretical arrival time "tat" (an integer, so Redis stores it
-- in 8 bytes) or "tat:frac" when the interval leaves a fraction of a µs.

-- The two integers of a state "tat:frac".
local function tb_split(v)
  local colon = string.find(v, ':', 1, true)
  return tonumber(string.sub(v, 1, colon - 1)), tonumber(string.sub(v, colon + 1))
end

-- The bucket stored as v (nil: none) at now.
local function tb_state(v, now)
  if not v then
    return now, 0
  end
  -- "tat" is a number as it is; "tat:frac" is not.
  local tat, frac = tonumber(v), 0
  if not tat then
    tat, frac = tb_split(v)
  end
  if tat < now then
    return now, 0
  end
  return tat, frac
end

local function tb_add(tat, frac, cost, num, den)
  local units = frac + cost * num
  local q = fdiv(units, den)
  return tat + q, units - q * den
end

-- What is left at now of a bucket at tat, frac; span is fdiv(cap * num,
-- den), the bucket's full span in whole µs.
local function tb_left(cap, num, den, span, tat, frac, now)
  local ahead = tat - now
  if ahead > span + 1 then
    return 0
  end
  return math.max(0, cap - cdiv(ahead * den + frac, num))
end

local function tb_reset(tat, frac, now)
  if frac > 0 then
    return tat - now + 1
  end
  return tat - now
end

local function tb_encode(tat, frac)
  if frac == 0 then
    return int(tat)
  end
  return string.format('%d:%d', tat, frac)
end

-- Decides a cost against the bucket stored as v (the key's value, or nil).
-- The admitted path, the common one, is written out: no calls but the
-- state's parse and format (fdiv and cdiv inline, as lib.lua explains).
local function tb_check(v, cap, num, den, now, cost)
  -- tb_state, written out.
  local tat, frac = now, 0
  if v then
    tat = tonumber(v)
    if not tat then
      tat, frac = tb_split(v)
    end
    if tat < now then
      tat, frac = now, 0
    end
  end
  local full = cap * num
  local span = (full - full % den) / den
  if cost > cap then
    return 0, 1, tb_left(cap, num, den, span, tat, frac, now), 0, tb_reset(tat, frac, now)
  end
  if cost == 0 then
    return 1, 0, tb_left(cap, num, den, span, tat, frac, now), 0, tb_reset(tat, frac, now)
  end
  local units = frac + cost * num
  local nfrac = units % den
  local ntat = tat + (units - nfrac) / den
  local ahead = ntat - now - span
  if ahead >= 0 then
    -- Past the span, or at it with more of a µs than the span's own part.
    local over = nfrac > full - span * den
    if ahead > 0 or over then
      if over then
        ahead = ahead + 1
      end
      return 0, 0, tb_left(cap, num, den, span, tat, frac, now), ahead, tb_reset(tat, frac, now)
    end
  end
  -- Allowed, so ntat - now <= span: what is left needs no clamp.
  local used = (ntat - now) * den + nfrac
  local left = cap - (used + (-used) % num) / num
  if left < 0 then
    left = 0
  end
  if nfrac == 0 then
    return 1, 0, left, 0, ntat - now, string.format('%d', ntat)
  end
  return 1, 0, left, 0, ntat - now + 1, string.format('%d:%d', ntat, nfrac)
end

local function tb_adjust(key, cap, num, den, now, delta, pad)
  local tat, frac = tb_state(redis.call('GET', key), now)
  if delta >= 0 then
    tat, frac = tb_add(tat, frac, delta, num, den)
    if tat - now > MAX_DEBT then
      tat, frac = now + MAX_DEBT, 0
    end
  else
    local back = -delta * num
    local q = fdiv(back, den)
    tat, frac = tat - q, frac - (back - q * den)
    if frac < 0 then
      tat, frac = tat - 1, frac + den
    end
    if tat < now then
      tat, frac = now, 0
    end
  end
  store(key, tb_encode(tat, frac), tb_reset(tat, frac, now), pad)
end
