-- settle_batch.lua: several independent settlements in one call, in
-- order, each as settle.lua makes one: a batch shares one call's fixed
-- cost. KEYS: each settlement's record. ARGV[1]: TTL padding in ms; then
-- per settlement 6 values: now µs or "" for the server's TIME (read once
-- per call), actual, "1" to cancel, the tombstone's TTL in µs, the spend
-- or "" and the measures or "" (see settle.lua).
-- Reply: each settlement's status.

local function settle_batch(keys, argv)
  local pad = tonumber(argv[1])
  local reply, server = {}, nil
  for i = 1, #keys do
    local a = 1 + (i - 1) * 6
    local now = argv[a + 1]
    if now == '' then
      server = server or clock('')
      now = server
    else
      now = tonumber(now)
    end
    reply[i] = settle_record(keys[i], now, pad, tonumber(argv[a + 2]), argv[a + 3] == '1', tonumber(argv[a + 4]), false,
      tonumber(argv[a + 5]), parse_measures(argv[a + 6]))
  end
  return reply
end
