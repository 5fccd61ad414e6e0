-- sem_acquire.lua: take n permits of a permit-expirable semaphore
-- (Redisson RPermitExpirableSemaphore tryAcquire).
--
-- KEYS[1]  pool: available permits
-- KEYS[2]  timeouts: permit id -> expiry
-- KEYS[3]  channel "redisson_sc:{name}"
-- KEYS[4]  acquisition latch "fairlock_acquire_latch:{name}:<request id>"
--          (not in Redisson; see below)
-- KEYS[5]  token counter "fairlock_sem_token:{name}" (not in Redisson)
-- ARGV[1]  n, the number of permits (at least 1)
-- ARGV[2]  lease in ms, -1 for none (Redisson sends the expiry instant
--          instead: now + lease, or the non-expiring score)
-- ARGV[3]  now (Unix ms, or -1: the server's clock; see sem_common.lua)
-- ARGV[4]  the non-expiring score, 922337203685477
-- ARGV[5]  publish command ("publish" or "spublish")
-- ARGV[6 .. 5+n]  the permit ids (raw bytes), made by the caller
-- ARGV[6+n]  latch lifetime in ms (0: no latch; not in Redisson)
--
-- A permit of the request is "held" when it is in the timeouts set with an
-- expiry after now. Ids of the request that are in the set but expired go
-- back to the pool first (a ZADD would otherwise overwrite them and their
-- count would be lost), then expired permits are reclaimed (at most n, as
-- Redisson). Then, when the pool has n permits, they are taken: the token
-- counter is INCRed (first: a token key that is not an integer fails the
-- script before it takes anything), the pool drops by n and every id enters
-- the timeouts set with its expiry; the set takes the pool's TTL when the
-- pool has one.
--
-- Reply (not Redisson's, whose caller is its own Java code): {1, token,
-- kept} when the request holds its permits, kept being how long Redis
-- keeps them regardless of their lease (the timeouts set's TTL in ms, -1:
-- none); {0, ms} otherwise: the time until the earliest permit expires (at
-- least 1), or -1 when no permit can expire.
--
-- Keys of ours follow the pool's lifetime (sem_follow, sem_latch_ttl in
-- sem_common.lua): the token counter takes the pool's TTL (or loses its own
-- when the pool has none), and the latch lives no longer than the pool, so
-- nothing of the semaphore is left once Redisson's expire() ran out.
-- A pool that is not a whole number within 2^53 (sem_exact_count) is an
-- error reply, nothing written (it used to INCR the token, then fail).
--
-- Copies of one request (a resend by go-redis, a copy delayed by a stalled
-- server) count once. The latch (not in Redisson): 'held:<token>' after a
-- copy took the permits, so a later copy replies {1, token} while all the
-- request's permits are held and an error once they are not (it never takes
-- permits again); 'void' once the caller gave the request up
-- (sem_abandon.lua): a later copy does nothing. Without a latch (none sent,
-- or expired), a copy finds its ids: all held, it replies {1, a new token}
-- (the first token is not known any more; a new one is still larger than
-- every token given before); some held, it takes nothing and replies
-- {0, ms until the earliest of them expires} (not in Redisson, where a copy
-- takes n more permits and re-adds ids already there: permits lost).
local pool = redis.call('get', KEYS[1])
if pool ~= false and sem_exact_count(pool) == nil then
    return sem_inexact_pool(KEYS[1]) -- before anything is written
end
local n = tonumber(ARGV[1])
local latchTTL = tonumber(ARGV[6 + n])
local now = sem_now(ARGV[3])
local held, soonest = 0, nil
for i = 6, 5 + n do
    local e = redis.call('zscore', KEYS[2], ARGV[i])
    if e ~= false and tonumber(e) > now then
        held = held + 1
        if soonest == nil or tonumber(e) < soonest then
            soonest = tonumber(e)
        end
    end
end
if latchTTL > 0 then
    local state = redis.call('get', KEYS[4])
    if state == 'void' then
        return redis.error_reply('fairlock: acquisition request abandoned')
    end
    if state ~= false then
        if held == n then
            return {1, tonumber(string.sub(state, 6)), sem_kept(KEYS[2])}
        end
        return redis.error_reply('fairlock: acquisition request already granted and its hold is over')
    end
end
if held == n then
    local token = redis.call('incr', KEYS[5])
    sem_follow(KEYS[1], KEYS[5])
    return {1, token, sem_kept(KEYS[2])}
end
if held > 0 then
    return {0, math.max(soonest - now, 1)}
end
local back = 0
for i = 6, 5 + n do
    back = back + redis.call('zrem', KEYS[2], ARGV[i])
end
if back > 0 then
    local value = redis.call('incrby', KEYS[1], back)
    if value > 0 then
        redis.call(ARGV[5], KEYS[3], value)
    end
end
sem_reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[5], now, n)
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= n then
    local token = redis.call('incr', KEYS[5])
    redis.call('decrby', KEYS[1], n)
    local expiry = sem_expiry(ARGV[2], now, ARGV[4])
    for i = 6, 5 + n do
        redis.call('zadd', KEYS[2], expiry, ARGV[i])
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    sem_follow(KEYS[1], KEYS[5])
    if latchTTL > 0 then
        redis.call('set', KEYS[4], 'held:' .. token, 'px', sem_latch_ttl(KEYS[1], latchTTL))
    end
    return {1, token, sem_kept(KEYS[2])}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[1] ~= nil and tonumber(first[2]) ~= tonumber(ARGV[4]) then
    return {0, math.max(tonumber(first[2]) - now, 1)}
end
return {0, -1}
