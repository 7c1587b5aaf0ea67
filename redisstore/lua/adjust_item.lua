-- adjust_item.lua: applies one adjustment of delta to an item charged at
-- at (µs), for adjust.lua and settle.lua. An item's keys are one, or two
-- for a sliding log (log, sum); p1..p3 as in check.lua.

local function adjust_item(alg, key, key2, p1, p2, p3, now, at, delta, pad)
  if alg == FIXED_WINDOW then
    fw_adjust(key, p1, p2, p3, now, at, delta, pad)
  elseif alg == SLIDING_COUNTER then
    sc_adjust(key, p1, p2, p3, now, at, delta, pad)
  elseif alg == SLIDING_LOG then
    sl_adjust(key, key2, p2, now, at, delta, pad)
  else
    tb_adjust(key, p1, p2, p3, now, delta, pad)
  end
end
