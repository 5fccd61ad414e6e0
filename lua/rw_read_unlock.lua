-- rw_read_unlock.lua: release one read hold (Redisson RedissonReadLock unlockInner).
--
-- KEYS[1]  lock hash
-- KEYS[2]  channel "redisson_rwlock:{name}"
-- KEYS[3]  the caller's read-hold timeout prefix "{name}:<uuid>:<tid>:rwlock_timeout"
-- KEYS[4]  the key prefix "{name}" (every owner's timeout keys start with it)
-- KEYS[5]  unlock latch "redisson_unlock_latch:{name}:<request-id>"
-- ARGV[1]  unlock message, "0"
-- ARGV[2]  reader owner id "<uuid>:<tid>"
-- ARGV[3]  publish command: "publish" or "spublish"
-- ARGV[4]  latch lifetime in milliseconds
--
-- Reply: nil when ARGV[2] holds no read hold, or only holds whose keys
-- have all expired (the field is then removed, see below); 0 when it still
-- holds read holds; 1 when it holds none any more (the lock freed, ARGV[1]
-- published, or other holds remaining). A retried call with the same latch
-- key returns the first reply (0 or 1).
local latched = redis.call('get', KEYS[5])
if latched == '0' or latched == '1' then
    return tonumber(latched)
end
local mode = redis.call('hget', KEYS[1], 'mode')
-- A free lock: Redisson publishes, stores the latch "1" and replies nil, so
-- a retry of this call would report a release (hazard H5). We publish (a
-- waiter may have missed a message) but store no latch: a retry replies nil
-- again.
if mode == false then
    redis.call(ARGV[3], KEYS[2], ARGV[1])
    return nil
end
local raw = redis.call('hget', KEYS[1], ARGV[2])
if not raw then
    return nil
end
local held = tonumber(raw)
if not held then
    return redis.error_reply('fairlock: read hold count of ' .. ARGV[2] .. ' is not an integer')
end
-- Not in Redisson: when every key of the caller's read holds has expired,
-- its holds are over (their leases ran out while other holds kept the
-- hash, and its client was told they were lost): the field is removed
-- whole, the lock's TTL rebuilt as below, and the reply is nil, not held.
-- This is also how a client gives back such a stale field.
local stale = true
for k = held, 1, -1 do
    if redis.call('pttl', KEYS[3] .. ':' .. k) > 0 then
        stale = false
        break
    end
end
local left = 0
if stale then
    redis.call('hdel', KEYS[1], ARGV[2])
else
    left = redis.call('hincrby', KEYS[1], ARGV[2], -1)
    if left == 0 then
        redis.call('hdel', KEYS[1], ARGV[2])
    end
end
local dropped = KEYS[3] .. ':' .. (left + 1)
if left > 0 then
    -- Not in Redisson: the caller's remaining holds keep the lease of the
    -- dropped (latest) hold when it is longer, since a Go handle's holds
    -- are valid until its latest acquisition's lease (internal/core).
    local t = redis.call('pttl', dropped)
    local below = KEYS[3] .. ':' .. left
    if t > 0 and t > redis.call('pttl', below) then
        redis.call('set', below, 1, 'px', t)
    end
end
redis.call('del', dropped)
-- Not in Redisson, whose reply is 0 whenever other holds remain: 0 only
-- when the caller still holds read holds, 1 when it holds none any more.
local mine = 1
if left > 0 then
    mine = 0
end
-- done(r): store the latch and reply r; a stale field's removal replies
-- nil and stores nothing (a retry finds no field and replies nil too).
local function done(r)
    if stale then
        return nil
    end
    redis.call('set', KEYS[5], r, 'px', ARGV[4])
    return r
end
if redis.call('hlen', KEYS[1]) > 1 then
    if mode == 'write' then
        -- Not in Redisson (which sets the TTL to the longest read hold's,
        -- cutting the writer's lease): the writer's lease is the TTL.
        return done(mine)
    end
    local longest = -3
    local fields = redis.call('hkeys', KEYS[1])
    for _, f in ipairs(fields) do
        local n = tonumber(redis.call('hget', KEYS[1], f))
        if type(n) == 'number' then
            for k = n, 1, -1 do
                local t = redis.call('pttl', KEYS[4] .. ':' .. f .. ':rwlock_timeout:' .. k)
                longest = math.max(longest, t)
            end
        end
    end
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
        return done(mine)
    end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
return done(1)
