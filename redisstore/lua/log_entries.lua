-- log_entries.lua: lists a sliding log's entries still in its window,
-- oldest first, without changing anything (tokenlimit.LogReader).
-- KEYS: the log and its sum; ARGV[1]: now in µs or "" for TIME; ARGV[2]:
-- TTL padding (unused); ARGV[3]: the window in µs.
-- Reply: time µs and cost of each entry, flattened.

local function log_entries(keys, argv)
  local now = clock(argv[1])
  local rows = redis.call('ZRANGEBYSCORE', keys[1], '(' .. int(now - tonumber(argv[3])), '+inf', 'WITHSCORES')
  local reply = {}
  for i = 1, #rows, 2 do
    reply[#reply + 1] = tonumber(rows[i + 1])
    reply[#reply + 1] = sl_cost(rows[i])
  end
  return reply
end
