-- rw_write_acquire.lua: take or re-enter the write hold of a read-write lock
-- (Redisson RedissonWriteLock tryLockInner).
--
-- KEYS[1]  lock hash
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  writer owner id "<uuid>:<tid>:write"
-- KEYS[2]  acquisition latch (not in Redisson; see latch_common.lua)
-- ARGV[3]  latch lifetime in milliseconds (0: no latch)
--
-- Only a free lock can be taken: read holds block every writer, the same
-- owner's included (no upgrade). A re-entry sets the TTL to the larger of
-- the TTL and the lease (Redisson adds the lease to the TTL: hazard H6, see
-- docs/design.md). Reply: "OK" when ARGV[2] now holds the write lock
-- (Redisson: nil), else the lock's PTTL (-1: no expiry).
local replay = latch_check(KEYS[2], ARGV[3], KEYS[1], ARGV[2])
if replay then
    return replay
end
local lease = tonumber(ARGV[1])
local mode = redis.call('hget', KEYS[1], 'mode')
-- Not in Redisson: a hash with no "mode" is a lock of another kind on the
-- same name (reentrant, fair, fenced), held by its owner: it keeps both
-- halves out (Redisson took it, writing "mode" into the other lock's hash).
if mode == false and redis.call('exists', KEYS[1]) == 1 then
    return redis.call('pttl', KEYS[1])
end
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], lease)
    latch_grant(KEYS[2], ARGV[3])
    return 'OK'
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), lease))
    latch_grant(KEYS[2], ARGV[3])
    return 'OK'
end
return redis.call('pttl', KEYS[1])
