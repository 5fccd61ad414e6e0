-- rw_write_unlock.lua: release one write hold (Redisson RedissonWriteLock unlockInner).
--
-- KEYS[1]  lock hash
-- KEYS[2]  channel "redisson_rwlock:{name}"
-- KEYS[3]  unlock latch "redisson_unlock_latch:{name}:<request-id>"
-- KEYS[4]  the key prefix "{name}" of the read holds' keys (not in Redisson)
-- ARGV[1]  message, "1" (Redisson's READ_UNLOCK_MESSAGE: wakes every waiter)
-- ARGV[2]  lease in milliseconds of the caller's latest acquisition
-- ARGV[3]  writer owner id "<uuid>:<tid>:write"
-- ARGV[4]  publish command: "publish" or "spublish"
-- ARGV[5]  latch lifetime in milliseconds
--
-- Reply: nil when ARGV[3] does not hold the write lock; 0 when it still
-- does (re-entered); 1 when its last write hold was released: the lock is
-- freed, or, when the owner also reads and one of its read holds' keys
-- lives, left in read mode with its read holds (TTL: the longest key's). Either way ARGV[1] is published (Redisson publishes only when the
-- lock is freed: readers waiting behind a writer that keeps its own reads
-- then slept until the lease ran out).
local latched = redis.call('get', KEYS[3])
if latched == '0' or latched == '1' then
    return tonumber(latched)
end
local mode = redis.call('hget', KEYS[1], 'mode')
-- A free lock: Redisson publishes, stores the latch "1" and replies nil, so
-- a retry of this call would report a release (hazard H5). We publish (a
-- waiter may have missed a message) but store no latch: a retry replies nil
-- again.
if mode == false then
    redis.call(ARGV[4], KEYS[2], ARGV[1])
    return nil
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if left > 0 then
    redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[2])))
    redis.call('set', KEYS[3], '0', 'px', ARGV[5])
    return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
-- Not in Redisson, which switches to read mode with the TTL left alone:
-- in read mode the lock lives as long as its longest read hold, so the TTL
-- becomes the longest of the writer's read holds' keys; when they have all
-- expired (their leases ran out under the writer's, and their client was
-- told they were lost) the lock is freed, not left read-locked by nobody
-- for the rest of the writer's lease.
local longest = -3
for _, f in ipairs(redis.call('hkeys', KEYS[1])) do
    local n = tonumber(redis.call('hget', KEYS[1], f))
    if f ~= 'mode' and n then
        for k = n, 1, -1 do
            longest = math.max(longest, redis.call('pttl', KEYS[4] .. ':' .. f .. ':rwlock_timeout:' .. k))
        end
    end
end
if longest > 0 then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('pexpire', KEYS[1], longest)
else
    redis.call('del', KEYS[1])
end
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], '1', 'px', ARGV[5])
return 1
