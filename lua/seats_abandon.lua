-- seats_abandon.lua: the caller gives up on an acquisition request whose
-- outcome it does not know (an error, a timeout, a context that ended).
-- Run after latch_common.lua, fair_common.lua and seats_common.lua.
--
-- KEYS[1..8]  as seats_acquire.lua
-- KEYS[9]  the request's acquisition latch
--          "fairlock_seats_acquire_latch:{T}:<request-id>"
-- ARGV[1]  owner id
-- ARGV[2]  latch lifetime in milliseconds (>= 1)
-- ARGV[3]  head grace in milliseconds (>= 1)
-- ARGV[4]  publish command
--
-- The latch becomes 'void' ('void:held' when a copy had been granted), so
-- a copy of the request that reaches Redis later does nothing. When the
-- owner holds seats (a copy had been granted: an owner id is one
-- acquisition's, so they are this request's even when the latch saying so
-- expired), they are given back here (and whoever that makes ready is woken). It does not leave the
-- queues: seats_leave.lua does. Reply: 1 when a copy had been granted, 0
-- otherwise. An error reply (nothing written) on a key of the wrong type.
local owner, latch_ttl, grace = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if not owner or owner == '' or not latch_ttl or not grace or grace < 1 then
    return redis.error_reply('fairlock: seats: bad arguments')
end
local bad = seats_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], ARGV[4], grace, true)
if bad then
    return bad
end
local was = redis.call('get', KEYS[9])
if was == 'void:held' then
    return 1
end
if was == 'void' then
    return 0
end
-- An owner id is one acquisition's: what it holds is this request's grant,
-- latched or not (a latch that expired while Redis was away is no reason
-- to keep the seats; issue 30 item 2).
local give = seats_holds(owner)
local granted = latch_token(was) ~= nil or give
redis.call('set', KEYS[9], granted and 'void:held' or 'void', 'px', math.max(1, latch_ttl))
seats_reclaim()
if give then
    give_back(owner)
end
prune_all()
finish_all()
return granted and 1 or 0
