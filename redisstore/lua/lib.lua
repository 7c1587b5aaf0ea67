-- lib.lua: integer helpers shared by the algorithms. Lua 5.1 numbers are
-- doubles: integers up to 2^53 are exact, but a/b is rounded, so every
-- division is fdiv's or cdiv's. Times are microseconds since the Unix epoch.
-- Nothing here reads a global when the file runs, only when its functions
-- do: the load of a Redis Functions library sees no globals.

-- floor(a/b) and ceil(a/b) for integers b > 0, |a| + b <= 2^53, exact:
-- the VM's a % b is a - floor(a/b)*b on the rounded quotient, and a rounded
-- quotient of such integers never crosses an integer (a non-integer a/b
-- lies at least 1/b from one, while rounding moves it at most
-- |a/b| * 2^-53 < 1/b), so a % b is the true remainder and the rest is
-- exact integer arithmetic. Hot paths write these expressions inline: a
-- Lua call costs Redis more than the division.
local function fdiv(a, b)
  return (a - a % b) / b
end

local function cdiv(a, b)
  return (a + (-a) % b) / b
end

-- The start of the window of length len holding now (windows start at
-- offset + k*len), never before earliest (a clock that steps back stays in the
-- newest window seen).
local function window_start(now, len, offset, earliest)
  return math.max(now - (now - offset) % len, earliest)
end

-- Integers stored as "a:b" or "a:b:c" in one string, parsed without a
-- table.
-- The two integers of "a:b", or nil, 0, 0 for no value.
local function parse2(s)
  if not s then
    return nil, 0, 0
  end
  local c = string.find(s, ':', 1, true)
  return true, tonumber(string.sub(s, 1, c - 1)), tonumber(string.sub(s, c + 1))
end

-- The three integers of "a:b:c", or nil, 0, 0, 0 for no value.
local function parse3(s)
  if not s then
    return nil, 0, 0, 0
  end
  local c1 = string.find(s, ':', 1, true)
  local c2 = string.find(s, ':', c1 + 1, true)
  return true, tonumber(string.sub(s, 1, c1 - 1)), tonumber(string.sub(s, c1 + 1, c2 - 1)), tonumber(string.sub(s, c2 + 1))
end

-- x as a decimal string (exact for |x| < 2^53).
local function int(x)
  return string.format('%d', x)
end

-- Writes value to key with a TTL of ttl_us rounded up to whole ms (plus the
-- caller's padding), or deletes the key when ttl_us is 0: nothing is kept
-- longer than its state means something.
-- The TTLs store formatted, by ms: most writes of a call, and of the calls
-- after it, repeat a few TTLs (a window's keys share its end, a fresh
-- bucket's TTL is its cost's interval), and formatting one costs Redis more
-- than the lookup. Emptied when it holds 1024. As a Redis Function it lasts
-- as long as the library's Lua state; as a script, one call.
local ttl_text, ttl_texts = {}, 0

local function store(key, value, ttl_us, pad_ms)
  if ttl_us <= 0 then
    redis.call('DEL', key)
    return
  end
  local ms = (ttl_us + (-ttl_us) % 1000) / 1000 + pad_ms
  local text = ttl_text[ms]
  if not text then
    -- A formatted integer: Redis would format a Lua number as a float
    -- (%.17g), which costs it more.
    text = string.format('%d', ms)
    if ttl_texts == 1024 then
      ttl_text, ttl_texts = {}, 0
    end
    ttl_text[ms], ttl_texts = text, ttl_texts + 1
  end
  redis.call('SET', key, value, 'PX', text)
end

-- The algorithm codes are tokenlimit.Algorithm's values.
local FIXED_WINDOW, SLIDING_LOG, SLIDING_COUNTER = 1, 2, 3
-- Bounds shared with package algo (checked by a test).
local MAX_LOG_ENTRIES = 1000
local MAX_FIXED_COUNT = 2199023255552 -- 2^41
local MAX_SLIDING_COUNT = 8589934592 -- 2^33
local MAX_DEBT = 2251799813685248 -- 2^51, algo.MaxDebt

-- How many KEYS an item of algorithm alg takes: a sliding log has two.
local function key_count(alg)
  if alg == SLIDING_LOG then
    return 2
  end
  return 1
end

-- An item's result in a reply: an item allowed with nothing to wait for
-- (the common case) as 2 values, -remaining (<= 0) and reset µs; any other
-- as 4: 1 + allowed + 2 * toolarge (1..4), remaining, retry µs, reset µs.
-- Every value is exact, as -x is for any x. put_result writes it from
-- reply[r + 1] and returns the index of its last value.
local function put_result(reply, r, ok, big, rem, retry, reset)
  if ok == 1 and big == 0 and retry == 0 then
    reply[r + 1], reply[r + 2] = -rem, reset
    return r + 2
  end
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = 1 + ok + 2 * big, rem, retry, reset
  return r + 4
end

-- The results of n items that put_result wrote from reply[r + 1], as 5
-- values each (allowed, toolarge, remaining, retry µs, reset µs: the form
-- reservation records keep), and whether every item was allowed.
local function widen(reply, r, n)
  local out, all = {}, true
  for o = 0, 5 * (n - 1), 5 do
    local f = reply[r + 1]
    if f <= 0 then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 1, 0, 0 - f, 0, reply[r + 2]
      r = r + 2
    else
      local ok = (f - 1) % 2
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = ok, (f - 1 - ok) / 2, reply[r + 2], reply[r + 3], reply[r + 4]
      all = all and ok == 1
      r = r + 4
    end
  end
  return out, all
end

-- The decision time: the caller's (a decimal string of µs) or the server's.
local function clock(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A packed decision time now: the caller's µs, or if negative the
-- server's TIME, read once per call: server is the call's reading so far
-- (nil for none). Returns the time and the call's reading.
local function packed_clock(now, server)
  if now >= 0 then
    return now, server
  end
  server = server or clock('')
  return server, server
end
