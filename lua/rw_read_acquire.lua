-- rw_read_acquire.lua: take or re-enter a read hold of a read-write lock
-- (Redisson RedissonReadLock tryLockInner).
--
-- KEYS[1]  lock hash: "mode" -> "read"/"write"; "<uuid>:<tid>" -> read holds;
--          "<uuid>:<tid>:write" -> write holds; the key's PTTL is the lease
-- KEYS[2]  the caller's read-hold timeout prefix "{name}:<uuid>:<tid>:rwlock_timeout";
--          hold k has the key KEYS[2] .. ":" .. k, whose PTTL is that hold's lease
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  reader owner id "<uuid>:<tid>"
-- ARGV[3]  the same owner's writer id "<uuid>:<tid>:write"
-- KEYS[3]  acquisition latch (not in Redisson; see latch_common.lua)
-- ARGV[4]  latch lifetime in milliseconds (0: no latch)
--
-- Readers share the lock; the owner holding the write lock may also read.
-- A caller's field whose every read-hold key has expired is replaced by a
-- new hold (count 1), not re-entered.
-- The lock's TTL becomes the larger of its TTL and the lease, so it never
-- drops below another hold's lease. Reply: "OK" when ARGV[2] now holds a
-- read hold (Redisson: nil), else the lock's PTTL (-1: no expiry).
local replay = latch_check(KEYS[3], ARGV[4], KEYS[1], ARGV[2])
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
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1)
    redis.call('pexpire', KEYS[2] .. ':1', lease)
    redis.call('pexpire', KEYS[1], lease)
    latch_grant(KEYS[3], ARGV[4])
    return 'OK'
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    -- Not in Redisson: a field of the caller whose holds' keys have all
    -- expired is a hold whose lease ran out while other holds kept the
    -- hash (its client was told it was lost); it is not re-entered (the
    -- count would then be one more than the client knows of) but replaced
    -- by a new hold.
    local n = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
    if n then
        local live = false
        for k = n, 1, -1 do
            if redis.call('pttl', KEYS[2] .. ':' .. k) > 0 then
                live = true
                break
            end
        end
        if not live then
            redis.call('hdel', KEYS[1], ARGV[2])
        end
    end
    local k = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local key = KEYS[2] .. ':' .. k
    redis.call('set', key, 1)
    redis.call('pexpire', key, lease)
    redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), lease))
    latch_grant(KEYS[3], ARGV[4])
    return 'OK'
end
return redis.call('pttl', KEYS[1])
