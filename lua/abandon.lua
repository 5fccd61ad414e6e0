-- abandon.lua: the caller gives up on an acquisition request (not in
-- Redisson; see latch_common.lua). Sent after an attempt whose outcome is
-- unknown (an error, a timeout, a context that ended), before the caller
-- returns without the lock.
--
-- KEYS[1]  lock hash
-- KEYS[2]  acquisition latch "fairlock_acquire_latch:{name}:<request-id>"
-- ARGV[1]  owner id
-- ARGV[2]  latch lifetime in milliseconds
--
-- The latch becomes 'void', so a copy of the request that reaches Redis
-- later does nothing. Reply: 1 when a copy had already taken (or re-entered)
-- the lock and the owner still holds it: that hold is the caller's to give
-- back (with an unlock); 0 otherwise.
local was = redis.call('get', KEYS[2])
redis.call('set', KEYS[2], 'void', 'px', ARGV[2])
if was == 'held' and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
    return 1
end
return 0
