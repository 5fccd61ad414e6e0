-- sem_acquire.lua: take n permits of a permit-expirable semaphore
-- (Redisson RPermitExpirableSemaphore tryAcquire).
--
-- KEYS[1]  pool: available permits
-- KEYS[2]  timeouts: permit id -> expiry
-- KEYS[3]  channel "redisson_sc:{name}"
-- KEYS[4]  acquisition latch "fairlock_acquire_latch:{name}:<first id, hex>"
--          (not in Redisson; see below)
-- ARGV[1]  n, the number of permits (at least 1)
-- ARGV[2]  lease in ms, -1 for none (Redisson sends the expiry instant
--          instead: now + lease, or the non-expiring score)
-- ARGV[3]  now (Unix ms, or -1: the server's clock; see sem_common.lua)
-- ARGV[4]  the non-expiring score, 922337203685477
-- ARGV[5]  publish command ("publish" or "spublish")
-- ARGV[6 .. 5+n]  the permit ids (raw bytes), made by the caller
-- ARGV[6+n]  latch lifetime in ms (0: no latch; not in Redisson)
--
-- Expired permits are reclaimed first (at most n, as Redisson). Then, when
-- the pool has n permits, they are taken: the pool drops by n and every id
-- enters the timeouts set with its expiry; the set takes the pool's TTL when
-- the pool has one. Reply: "OK" when taken; else the time in ms until the
-- earliest permit expires (at least 1), or -1 when no permit can expire
-- (Redisson replies ":<expiry instant>" or nil; only the caller reads it).
--
-- The latch (not in Redisson) makes copies of one request count once (a
-- resend by go-redis, a copy delayed by a stalled server): 'held' after a
-- copy took the permits, so a later copy replies "OK" while one of its ids
-- is still held and an error once none is (it never takes permits again);
-- 'void' once the caller gave the request up (sem_abandon.lua): a later copy
-- does nothing.
local n = tonumber(ARGV[1])
local latchTTL = tonumber(ARGV[6 + n])
if latchTTL > 0 then
    local state = redis.call('get', KEYS[4])
    if state == 'void' then
        return redis.error_reply('fairlock: acquisition request abandoned')
    end
    if state == 'held' then
        for i = 6, 5 + n do
            if redis.call('zscore', KEYS[2], ARGV[i]) then
                return 'OK'
            end
        end
        return redis.error_reply('fairlock: acquisition request already granted and its hold is over')
    end
end
-- A copy sent without a latch, or whose latch has expired: one of its ids
-- is still held, so another copy took the permits (not in Redisson, where
-- it would take n more and add ids already there: permits lost).
for i = 6, 5 + n do
    if redis.call('zscore', KEYS[2], ARGV[i]) then
        return 'OK'
    end
end
local now = sem_now(ARGV[3])
sem_reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[5], now, n)
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= n then
    redis.call('decrby', KEYS[1], n)
    local expiry = sem_expiry(ARGV[2], now, ARGV[4])
    for i = 6, 5 + n do
        redis.call('zadd', KEYS[2], expiry, ARGV[i])
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    if latchTTL > 0 then
        redis.call('set', KEYS[4], 'held', 'px', latchTTL)
    end
    return 'OK'
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[1] ~= nil and tonumber(first[2]) ~= tonumber(ARGV[4]) then
    return math.max(tonumber(first[2]) - now, 1)
end
return -1
