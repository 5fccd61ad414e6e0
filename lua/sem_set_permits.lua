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
-- the total was n already. Reply: nil. A pool that is not a whole number
-- within 2^53 is refused with an error reply and left as it is (not in
-- Redisson: see sem_exact_count), and so is an n that is not a whole
-- number within 2^53 (nothing written).
if sem_count_arg(ARGV[1]) == nil then
    return sem_out_of_range('count', ARGV[1])
end
local available = redis.call('get', KEYS[1])
if available == false then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return nil
end
local count = sem_exact_count(available)
if count == nil then
    return sem_inexact_pool(KEYS[1])
end
local total = redis.call('zcard', KEYS[3]) + count
if total == tonumber(ARGV[1]) then
    return nil
end
redis.call('incrby', KEYS[1], sem_int(tonumber(ARGV[1]) - total))
redis.call(ARGV[2], KEYS[2], ARGV[1])
return nil
