-- reserve_batch.lua: several independent reservations in one call, in
-- order, each as reserve.lua makes one: a batch shares one call's fixed
-- cost. ARGV[1]: TTL padding in ms; ARGV[2]: a MessagePack array holding
-- per reservation: now in µs or -1 for the server's TIME (read once per
-- call), the number of items n, the record's TTL in µs, 5 values per item
-- as in check.lua and each item's settle rule; ARGV[3..]: each
-- reservation's digest. KEYS: per reservation its record, then its items'
-- keys as in check.lua.
-- Reply: per reservation the number of values of its reply, then
-- reserve.lua's reply.

local function reserve_batch(keys, argv)
  local pad = tonumber(argv[1])
  local p = cmsgpack.unpack(argv[2])
  local reply, server = {}, nil
  local a, k, j = 0, 1, 0
  while a < #p do
    j = j + 1
    local now, n, ttl = p[a + 1], p[a + 2], p[a + 3]
    if now < 0 then
      server = server or clock('')
      now = server
    end
    local one = reserve_one(keys, k, p, a + 3, n, argv[2 + j], ttl, now, pad)
    reply[#reply + 1] = #one
    for _, v in ipairs(one) do
      reply[#reply + 1] = v
    end
    k = k + 1
    for i = 1, n do
      k = k + key_count(p[a + 3 + (i - 1) * 5 + 1])
    end
    a = a + 3 + 6 * n
  end
  return reply
end
