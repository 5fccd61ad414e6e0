-- sem_set_permits.lua: set the semaphore's total (available + acquired)
-- to n (Redisson setPermits).
--
-- KEYS[1]  pool
-- KEYS[2]  channel
-- KEYS[3]  timeouts
-- ARGV[1]  n
-- ARGV[2]  publish command
--
-- An absent pool is set to n. Otherwise the pool moves by n minus the
-- current total (acquired = every permit in the timeouts set, expired or
-- not); it may go below 0 when more than n are held. n is published unless
-- the total was n already. Reply: nil.
local available = redis.call('get', KEYS[1])
if available == false then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return nil
end
local total = redis.call('zcard', KEYS[3]) + tonumber(available)
if total == tonumber(ARGV[1]) then
    return nil
end
redis.call('incrby', KEYS[1], tonumber(ARGV[1]) - total)
redis.call(ARGV[2], KEYS[2], ARGV[1])
return nil
