-- sem_try_set_permits.lua: set the number of permits of a semaphore that
-- has none yet (Redisson trySetPermits).
--
-- KEYS[1]  pool
-- KEYS[2]  channel
-- ARGV[1]  n
-- ARGV[2]  publish command
--
-- Reply: 1 when the pool was absent: it now holds n, and n is published;
-- 0 otherwise, nothing changed. An n that is not a whole number within
-- 2^53 is refused with an error reply, nothing written (not in Redisson).
if sem_count_arg(ARGV[1]) == nil then
    return sem_out_of_range('count', ARGV[1])
end
if redis.call('exists', KEYS[1]) == 1 then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
