-- sem_fair_leave.lua: a waiter gives up and leaves the semaphore's queue
-- (the fair lock's acquireFailed). Run after latch_common.lua,
-- queue_scalable.lua, res_sem.lua and fair_common.lua.
--
-- KEYS[1..8]  as sem_fair_acquire.lua
-- ARGV[1]  owner id of the leaver
-- ARGV[2]  the leaver's wait slot in milliseconds: the one it queued with
-- ARGV[3]  head grace in milliseconds (<= 0: off)
-- ARGV[4]  publish command: "publish" or "spublish"
--
-- Every waiter behind the leaver gets its deadline lowered by the leaver's
-- slot; its ask is forgotten; the waiters that move into the first two
-- places are woken (the one behind a blocking head may fit now), and a new
-- head that fits gets its grace. Safe to repeat. Reply: 1 when the owner
-- was queued, 0 when not. An error reply (nothing written) when a key
-- holds the wrong type.
local owner, wait, grace = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if not wait or not grace then
    return redis.error_reply('fairlock: semaphore: bad arguments')
end
local bad = sem_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], true)
if bad then
    return bad
end
fair_init(KEYS[1], nil, nil, KEYS[4], KEYS[8], KEYS[6], ARGV[4], '0', false)
sem_reclaim()
local _, head0, second0 = begin()
local was = q_queued(owner)
q_remove(owner, wait)
sem_want_drop(owner)
finish(nil, head0, second0, RECLAIMED, grace)
sem_tidy(GRACE_MARGIN, grace)
return was and 1 or 0
