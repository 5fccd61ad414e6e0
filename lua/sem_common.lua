-- sem_common.lua: shared parts of the permit-expirable semaphore scripts
-- (Redisson's RPermitExpirableSemaphore), prepended by package lua to every
-- sem_*.lua script so each stays one atomic EVAL.
--
-- The semaphore's keys (Redisson's names):
--   pool      the semaphore's name: a string, the count of available permits
--             (absent until trySetPermits / setPermits / addPermits)
--   timeouts  "{name}:timeout" ("name:timeout" when the name has a hash tag):
--             a sorted set, member = permit id (16 raw bytes), score = the
--             permit's expiry in Unix ms, or the non-expiring score
--             922337203685477 for a permit taken without a lease
--   channel   "redisson_sc:{name}": the new count of available permits is
--             published on it whenever permits come back
--
-- "now" arguments: a Unix ms instant (Redisson's contract: the caller's
-- clock), or -1 for the Redis server's own clock (TIME). Not in Redisson:
-- our clients send -1, so every expiry they write and every reclaim they
-- run is on one clock, the server's (docs/design.md, "The permit-expirable
-- semaphore").

-- The instant a "now" argument stands for.
local function sem_now(arg)
    local now = tonumber(arg)
    if now < 0 then
        local t = redis.call('time')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    return now
end

-- The expiry score of a permit taken at now with lease ms (-1: no lease).
local function sem_expiry(lease, now, never)
    lease = tonumber(lease)
    if lease < 0 then
        return never
    end
    return now + lease
end

-- Reclaims expired permits (score <= now), at most limit of them (-1: all):
-- they leave the timeouts set and their count goes back to the pool, whose
-- new count is published when positive. Members are removed in chunks (a
-- single unpack of thousands of members overflows Lua's stack; not in
-- Redisson, which unpacks them at once). Returns how many were reclaimed.
local function sem_reclaim(pool, timeouts, channel, pubcmd, now, limit)
    local expired = redis.call('zrangebyscore', timeouts, 0, now, 'limit', 0, limit)
    if #expired == 0 then
        return 0
    end
    for i = 1, #expired, 1000 do
        redis.call('zrem', timeouts, unpack(expired, i, math.min(i + 999, #expired)))
    end
    local value = redis.call('incrby', pool, #expired)
    if value > 0 then
        redis.call(pubcmd, channel, value)
    end
    return #expired
end
