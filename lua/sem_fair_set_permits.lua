-- sem_fair_set_permits.lua: set a fair semaphore's pool (not in Redisson).
-- Run after latch_common.lua, queue_scalable.lua, res_sem.lua and
-- fair_common.lua.
--
-- KEYS[1..8]  as sem_fair_acquire.lua
-- ARGV[1]  the pool: permits, an integer, 0 <= pool <= 2^53
-- ARGV[2]  head grace in milliseconds (<= 0: off)
-- ARGV[3]  publish command: "publish" or "spublish"
--
-- Holders keep their permits: a pool set below what they hold leaves
-- fewer than none free until enough give back. A larger pool wakes the
-- head and the waiter behind it; queued waiters that ask for more than the
-- new pool are pruned when they reach the head (their next call is
-- refused). Reply: the pool before (-1: not set). An error reply (nothing
-- written) on a bad argument or a key of the wrong type.
local pool, grace = tonumber(ARGV[1]), tonumber(ARGV[2])
if not pool or pool < 0 or pool ~= math.floor(pool) or pool > 9007199254740992 or not grace then
    return redis.error_reply('fairlock: semaphore: bad arguments')
end
local bad = sem_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], true)
if bad then
    return bad
end
local old = POOL
redis.call('set', KEYS[3], string.format('%d', pool)) -- plain digits, never an exponent form
POOL = pool
fair_init(KEYS[1], nil, nil, KEYS[4], KEYS[8], KEYS[6], ARGV[3], '0', false)
sem_reclaim()
local head, head0, second0 = begin()
prune(nil, NOW, head, grace)
finish(nil, head0, second0, old == nil or pool > old or RECLAIMED, grace)
sem_tidy(GRACE_MARGIN, grace)
return old or -1
