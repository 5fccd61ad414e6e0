-- sem_add_permits.lua: add n permits to the pool, n may be negative
-- (Redisson addPermits).
--
-- KEYS[1]  pool
-- KEYS[2]  channel
-- ARGV[1]  n
-- ARGV[2]  publish command
--
-- The pool (0 when absent) becomes its count + n, written with SET (which,
-- as in Redisson, drops a TTL the pool had); n is published when positive.
-- Reply: nil. A pool that is not a whole number within 2^53 is refused
-- with an error reply and left as it is (not in Redisson: see
-- sem_exact_count).
local value = sem_exact_count(redis.call('get', KEYS[1]) or 0)
if value == nil then
    return sem_inexact_pool(KEYS[1])
end
redis.call('set', KEYS[1], value + tonumber(ARGV[1]))
if tonumber(ARGV[1]) > 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return nil
