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
-- A latch 'held:<token>' (an acquisition that returned a fencing token)
-- counts as 'held'. The latch becomes 'void' ('void:held' when a copy had taken the lock), so
-- a copy of the request that reaches Redis later does nothing. Reply: 1 when
-- a copy had taken (or re-entered) the lock and the owner still holds it:
-- that hold is the caller's to give back (with an unlock); 0 otherwise. A
-- repeat (the caller did not get the first reply) replies the same while the
-- owner holds the lock.
local was = redis.call('get', KEYS[2])
local held = redis.call('hexists', KEYS[1], ARGV[1]) == 1
if was == 'void:held' then
    return held and 1 or 0
end
if was == 'void' then
    return 0
end
held = held and (was == 'held' or latch_token(was) ~= nil)
redis.call('set', KEYS[2], held and 'void:held' or 'void', 'px', ARGV[2])
return held and 1 or 0
