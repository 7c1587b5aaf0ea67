-- reset.lua: deletes a budget's keys (tokenlimit.Store.Reset), through a
-- script so that it goes the way of every other call. Reply: empty.

local function reset(keys, _)
  redis.call('DEL', unpack(keys))
  return {}
end
