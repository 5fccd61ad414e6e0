-- seats_leave.lua: a waiter gives up and leaves every queue it is in (the
-- fair multi-seat hold; not in Redisson). Run after latch_common.lua,
-- fair_common.lua and seats_common.lua.
--
-- KEYS[1..8]  as seats_acquire.lua
-- ARGV[1]  owner id of the leaver
-- ARGV[2]  head grace in milliseconds (>= 1)
-- ARGV[3]  publish command
--
-- The waiters that this makes ready get their grace and are woken. Safe
-- to repeat. Reply: 1 when the owner was queued, 0 when not. An error
-- reply (nothing written) on a key of the wrong type or a bad argument.
local owner, grace = ARGV[1], tonumber(ARGV[2])
if not owner or owner == '' or not grace or grace < 1 then
    return redis.error_reply('fairlock: seats: bad arguments')
end
local bad = seats_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], ARGV[3], grace, true)
if bad then
    return bad
end
seats_reclaim()
local was = 0
if rec(owner) and redis.call('hexists', S_HOLDS, owner) == 0 then
    leave_all(owner)
    was = 1
end
prune_all()
finish_all()
return was
