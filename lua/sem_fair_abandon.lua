-- sem_fair_abandon.lua: the caller gives up on an acquisition request whose
-- outcome it does not know (an error, a timeout, a context that ended).
-- Run after latch_common.lua, queue_scalable.lua, res_sem.lua and
-- fair_common.lua.
--
-- KEYS[1..8]  as sem_fair_acquire.lua
-- KEYS[9]  the request's acquisition latch
--          "fairlock_sem_acquire_latch:{name}:<request-id>"
-- ARGV[1]  owner id
-- ARGV[2]  latch lifetime in milliseconds (>= 1)
-- ARGV[3]  head grace in milliseconds (<= 0: off)
-- ARGV[4]  publish command: "publish" or "spublish"
--
-- The latch becomes 'void' ('void:held' when a copy had been granted), so a
-- copy of the request that reaches Redis later does nothing (it is
-- answered "acquisition request abandoned"). When the owner holds permits
-- (a copy had been granted: an owner id is one acquisition's, so its
-- permits are this request's even when the latch saying so expired), they
-- are given back here (and the front of the queue woken). It does not leave the queue: a copy that
-- queued the owner is undone by sem_fair_leave.lua.
-- Reply: 1 when a copy had been granted (its permits are given back, by
-- this call or by an earlier call of it), 0 otherwise. An error reply
-- (nothing written) when a key holds the wrong type.
local owner, grace = ARGV[1], tonumber(ARGV[3])
if not grace or not tonumber(ARGV[2]) then
    return redis.error_reply('fairlock: semaphore: bad arguments')
end
local bad = sem_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], true)
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
-- to keep the permits; issue 30 item 2).
local give = sem_holds(owner)
local granted = latch_token(was) ~= nil or give
redis.call('set', KEYS[9], granted and 'void:held' or 'void', 'px', math.max(1, tonumber(ARGV[2])))
fair_init(KEYS[1], nil, nil, KEYS[4], KEYS[8], KEYS[6], ARGV[4], '0', false)
sem_reclaim()
local _, head0, second0 = begin()
if give then
    USED = USED - (tonumber(HOLD[owner]) or 0)
    sem_drop(owner)
end
finish(nil, head0, second0, give or RECLAIMED, grace)
sem_tidy(GRACE_MARGIN, grace)
return granted and 1 or 0
