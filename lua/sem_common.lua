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
--   token     "fairlock_sem_token:{name}" (ours, not Redisson's): a counter,
--             INCRed by every grant of sem_acquire.lua (the fencing token of
--             the Go acquisition); Redisson's scripts never touch it
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

-- Reclaims expired permits (score <= now, from -inf: Redisson's scripts
-- start at 0, so a negative score, which no client writes, stayed in the
-- set for ever, counted as acquired and revived by updateLeaseTime), at
-- most limit of them (-1: all):
-- they leave the timeouts set and their count goes back to the pool, whose
-- new count is published when positive. Members are removed in chunks (a
-- single unpack of thousands of members overflows Lua's stack; not in
-- Redisson, which unpacks them at once). Returns how many were reclaimed.
local function sem_reclaim(pool, timeouts, channel, pubcmd, now, limit)
    local expired = redis.call('zrangebyscore', timeouts, '-inf', now, 'limit', 0, limit)
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

-- The raw permit ids of a hold's owner id: the ids' hex, joined with ','
-- (package semaphore's Permit owner; not in Redisson).
local function sem_owner_ids(owner)
    local ids = {}
    for h in string.gmatch(owner, '[^,]+') do
        ids[#ids + 1] = (string.gsub(h, '..', function(x) return string.char(tonumber(x, 16)) end))
    end
    return ids
end

-- Whether every id of ids is held in timeouts: present with an expiry
-- after now.
local function sem_all_held(timeouts, ids, now)
    if #ids == 0 then
        return false
    end
    for _, id in ipairs(ids) do
        local e = redis.call('zscore', timeouts, id)
        if e == false or tonumber(e) <= now then
            return false
        end
    end
    return true
end

-- The pool's count read as a Lua number, or nil when the pool holds what a
-- Lua number cannot count exactly: not a number, not a whole number, or
-- beyond 2^53 either way (Lua's numbers are doubles, so -9e18 + 3 is -9e18).
-- Not in Redisson, whose scripts do the arithmetic regardless: setPermits
-- and addPermits refuse such a pool (damage: no client writes one) rather
-- than write a total off by the precision lost.
local function sem_exact_count(value)
    local n = tonumber(value)
    if n == nil or n ~= math.floor(n) or n > 9007199254740992 or n < -9007199254740992 then
        return nil
    end
    return n
end

-- The count argument arg read as a Lua number, or nil when it is not a
-- whole number within 2^53 either way (package semaphore's MaxPermits; not
-- in Redisson, whose counts are Java ints).
local function sem_count_arg(arg)
    return sem_exact_count(arg)
end

-- n (a whole Lua number within 2^53) as Redis takes an integer: plain
-- digits, never an exponent form such as "1.152921504606847e+18" (how a
-- Lua number can reach Redis through redis.call).
local function sem_int(n)
    return string.format('%d', n)
end

-- The error reply for a count argument sem_count_arg refuses, or for a
-- pool a call would move beyond 2^53.
local function sem_out_of_range(what, v)
    return redis.error_reply('fairlock: semaphore ' .. what .. ' ' .. tostring(v) .. ' is not a whole number within 2^53')
end

-- The lifetime of a key of ours beside the semaphore (the token counter, a
-- latch) follows the pool's (not in Redisson, which has no such keys):
-- Redisson's expire() gives the pool and the timeouts set a TTL, and once
-- they are gone nothing of the semaphore may be left (Redisson's
-- testExpiration). sem_follow gives key the pool's TTL when the pool has
-- one (never shortening a longer TTL of key), and takes it away when the
-- pool has none (the token must live as long as the semaphore: a counter
-- that restarted would hand out tokens older than ones already given).
local function sem_follow(pool, key)
    local ttl = redis.call('pttl', pool)
    if ttl > 0 then
        local own = redis.call('pttl', key)
        if own < ttl then -- -1 (no TTL) included: it goes with the pool
            redis.call('pexpire', key, ttl)
        end
    elseif ttl == -1 then
        redis.call('persist', key)
    end
end

-- A latch's lifetime: ms, cut to the pool's remaining TTL when it has one
-- (the latch has no use once the semaphore's keys are gone).
local function sem_latch_ttl(pool, ms)
    local ttl = redis.call('pttl', pool)
    if ttl > 0 and ttl < tonumber(ms) then
        return ttl
    end
    return ms
end

-- How long Redis keeps the permits of a grant (the reply's third element):
-- the timeouts set's TTL in ms, or -1 when it has none (the permits then
-- last their lease). The record inherits the pool's TTL (Redisson's rule):
-- a holder's validity must not outlast it.
local function sem_kept(timeouts)
    local ttl = redis.call('pttl', timeouts)
    if ttl > 0 then
        return ttl
    end
    return -1
end

-- The error reply for a pool sem_exact_count refuses.
local function sem_inexact_pool(pool)
    return redis.error_reply('fairlock: semaphore pool ' .. pool .. ' does not hold a whole number within 2^53')
end
