-- sem_add_permits.lua: add n permits to the pool, n may be negative
-- (Redisson addPermits).
--
-- KEYS[1]  pool
-- KEYS[2]  channel
-- ARGV[1]  n
-- ARGV[2]  publish command
--
-- The pool (0 when absent) becomes its count + n, keeping its TTL (not in
-- Redisson, whose SET drops it while the timeouts set keeps the TTL it
-- inherited: the pool then outlived its held permits' record, and their
-- count was lost for good); n is published when positive. Reply: nil. A pool that is not a whole number within 2^53 is
-- refused with an error reply and left as it is (not in Redisson: see
-- sem_exact_count), and so are an n, or a new count, that is not one
-- (nothing written).
local delta = sem_count_arg(ARGV[1])
if delta == nil then
    return sem_out_of_range('delta', ARGV[1])
end
local value = sem_exact_count(redis.call('get', KEYS[1]) or 0)
if value == nil then
    return sem_inexact_pool(KEYS[1])
end
-- (compared as value > 2^53 - delta: value + delta itself may round)
if (delta > 0 and value > 9007199254740992 - delta) or (delta < 0 and value < -9007199254740992 - delta) then
    return sem_out_of_range('pool', sem_int(value) .. ' + ' .. sem_int(delta))
end
redis.call('set', KEYS[1], sem_int(value + delta), 'keepttl')
if tonumber(ARGV[1]) > 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return nil
