-- sem_release_many.lua: give back several permits by id, all or none
-- (Redisson RPermitExpirableSemaphore tryRelease(ids)).
--
-- KEYS[1]  pool
-- KEYS[2]  channel
-- KEYS[3]  timeouts
-- ARGV[1]  the number of ids
-- ARGV[2]  now (Unix ms, or -1: the server's clock)
-- ARGV[3]  publish command
-- ARGV[4 ..]  the permit ids (raw bytes)
--
-- When one id is not in the timeouts set or has expired, nothing changes
-- and the reply is 0. Otherwise every expired permit is reclaimed, the ids
-- leave the set and go back to the pool, and the number given back is
-- published (Redisson's message: the count released, not the pool's).
-- Reply: that number (fewer than the ids when an id was repeated).
local now = sem_now(ARGV[2])
for i = 4, #ARGV do
    local expiry = redis.call('zscore', KEYS[3], ARGV[i])
    if expiry == false or tonumber(expiry) <= now then
        return 0
    end
end
sem_reclaim(KEYS[1], KEYS[3], KEYS[2], ARGV[3], now, -1)
local removed = 0
for i = 4, #ARGV do
    removed = removed + redis.call('zrem', KEYS[3], ARGV[i])
end
redis.call('incrby', KEYS[1], removed)
redis.call(ARGV[3], KEYS[2], removed)
return removed
