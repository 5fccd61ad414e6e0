-- sem_fair_add_permits.lua: add to (or, with a negative delta, take from)
-- a fair semaphore's pool (not in Redisson). Run after latch_common.lua,
-- queue_scalable.lua, res_sem.lua and fair_common.lua.
--
-- KEYS[1..8]  as sem_fair_acquire.lua
-- ARGV[1]  delta: an integer, |delta| <= 2^53; the new pool must be too
-- ARGV[2]  head grace in milliseconds (<= 0: off)
-- ARGV[3]  publish command: "publish" or "spublish"
--
-- As sem_fair_set_permits.lua with the pool set to pool + delta. Reply:
-- the new pool. Error replies (nothing written): "fairlock: semaphore
-- permits not set" (set the pool first), "fairlock: semaphore pool would
-- be negative", a bad argument, a key of the wrong type.
local delta, grace = tonumber(ARGV[1]), tonumber(ARGV[2])
if not delta or delta ~= math.floor(delta) or math.abs(delta) > 9007199254740992 or not grace then
    return redis.error_reply('fairlock: semaphore: bad arguments')
end
local bad = sem_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], true)
if bad then
    return bad
end
if POOL == nil then
    return redis.error_reply('fairlock: semaphore permits not set')
end
local old, pool = POOL, POOL + delta
if pool < 0 then
    return redis.error_reply('fairlock: semaphore pool would be negative')
end
if delta > 0 and old > 9007199254740992 - delta then -- (pool itself may have rounded)
    return redis.error_reply('fairlock: semaphore: bad arguments (the pool would be beyond 2^53)')
end
redis.call('set', KEYS[3], string.format('%d', pool)) -- plain digits, never an exponent form
POOL = pool
fair_init(KEYS[1], nil, nil, KEYS[4], KEYS[8], KEYS[6], ARGV[3], '0', false)
sem_reclaim()
local head, head0, second0 = begin()
prune(nil, NOW, head, grace)
finish(nil, head0, second0, pool > old or RECLAIMED, grace)
sem_tidy(GRACE_MARGIN, grace)
return pool
