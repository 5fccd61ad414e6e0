-- sem_counts.lua: the semaphore's counts after reclaiming every expired
-- permit (Redisson availablePermits, acquiredPermits and getPermits in one
-- script; each of Redisson's reclaims the same way first).
--
-- KEYS[1]  pool
-- KEYS[2]  timeouts
-- KEYS[3]  channel
-- ARGV[1]  now (Unix ms, or -1: the server's clock)
-- ARGV[2]  publish command
--
-- Reply: {available, acquired, exists}: available is the pool's count (0
-- when absent), acquired the timeouts set's size, exists 1 when the pool
-- exists (getPermits is available + acquired when it does, else 0).
sem_reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[2], sem_now(ARGV[1]), -1)
local value = redis.call('get', KEYS[1])
local acquired = redis.call('zcard', KEYS[2])
if value == false then
    return {0, acquired, 0}
end
return {tonumber(value), acquired, 1}
