-- res_sem.lua: the fair semaphore's resource (not in Redisson): a pool of
-- permits, granted to owners in queue order. It is not a script by itself:
-- package wire prepends latch_common.lua, queue_scalable.lua and this file,
-- then fair_common.lua (the fair rules: wait slots, pruning, the head's two
-- graces, wake-ups, sleep bounds) to every sem_fair_*.lua body. It
-- implements the resource interface described in res_lock.lua.
--
-- Keys (all with the semaphore's hash tag, one cluster slot):
--   holders  hash "fairlock_sem:{name}": owner -> permits it holds
--   leases   zset "fairlock_sem_lease:{name}": owner -> end of its lease,
--            Redis server clock (TIME), Unix milliseconds
--   permits  string "fairlock_sem_permits:{name}": the pool, an integer
--            >= 0; absent: not set (acquisitions are refused)
--   wants    hash "fairlock_sem_wants:{name}": queued owner -> permits it
--            asks for; an owner's field goes when it leaves the queue
--            (granted, gave up, pruned), the key when the queue empties
-- and the scalable queue's hash, the head grace, the token counter (see
-- the sem_fair_*.lua headers).
--
-- The rule (golang.org/x/sync/semaphore.Weighted's): free permits are the
-- pool less the permits of holders whose lease has not ended; grants follow
-- the queue's order, and a head asking for more permits than are free
-- blocks the waiters behind it, smaller requests too. A waiter asking for
-- more than the pool can never be granted: a caller is refused, a head is
-- pruned (res_doomed), as Weighted does not queue a request bigger than its
-- size. An owner holds at most one grant at a time: an owner that holds
-- permits is refused a second acquisition (a copy of the granting request
-- is answered from its latch).
--
-- Time: every instant here is the server's clock, read once per script
-- (NOW). Leases end on it; a holder whose lease has ended is reclaimed
-- (removed) by the next script that runs on the semaphore, and a script
-- that reclaims wakes the front of the queue, as a release does.

local HOLDERS, LEASES, PERMITS, WANTS
local NOW       -- the server clock, Unix ms
local POOL      -- the pool, nil when not set
local USED      -- permits held by holders whose lease has not ended
local RECLAIMED -- this script reclaimed expired holders
local WANT = {} -- owner -> permits asked (false: none stored)

local function sem_type(key)
    local t = redis.call('type', key)
    if type(t) == 'table' then
        t = t.ok
    end
    return t
end

-- sem_init names the keys, reads the clock and the pool, and checks that
-- every key the scripts write holds its type (or is absent). Returns an
-- error reply, or nil. Writes nothing.
local function sem_init(holders, leases, permits, queue, wants, grace_key, token)
    HOLDERS, LEASES, PERMITS, WANTS = holders, leases, permits, wants
    local t = redis.call('time')
    NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local want = {[holders] = 'hash', [leases] = 'zset', [permits] = 'string', [queue] = 'hash',
        [wants] = 'hash', [grace_key] = 'string', [token] = 'string'}
    for _, key in ipairs({holders, leases, permits, queue, wants, grace_key, token}) do
        local got = sem_type(key)
        if got ~= 'none' and got ~= want[key] then
            return redis.error_reply('fairlock: semaphore key ' .. key .. ' holds a ' .. got .. ', not a ' .. want[key])
        end
    end
    local p = redis.call('get', permits)
    if p then
        if not string.match(p, '^%d+$') then
            return redis.error_reply('fairlock: semaphore permits key ' .. permits .. ' does not hold an integer >= 0')
        end
        POOL = tonumber(p)
    end
    return nil
end

-- sem_holds: whether owner holds permits whose lease has not ended
-- (read-only: an ended lease counts as gone before it is reclaimed).
local function sem_holds(owner)
    local score = redis.call('zscore', LEASES, owner)
    return score ~= false and score ~= nil and tonumber(score) > NOW and redis.call('hexists', HOLDERS, owner) == 1
end

-- sem_count: the permits a holder's field stands for. A field that is
-- not a count (damaged: not an integer >= 1) counts as the whole pool, so
-- that nothing is granted on its permits until it is released or its
-- lease ends.
local function sem_count(v)
    if type(v) ~= 'string' or not string.match(v, '^0*[1-9]%d*$') then
        return POOL or 0
    end
    return tonumber(v)
end

-- sem_used sums the permits of the holders (O(holders), at most the pool).
local function sem_used()
    local used = 0
    for _, v in ipairs(redis.call('hvals', HOLDERS)) do
        used = used + sem_count(v)
    end
    return used
end

-- sem_reclaim removes the holders whose lease has ended (and a holder
-- with no lease at all, which no script writes), then counts USED.
local function sem_reclaim()
    local ended = redis.call('zrangebyscore', LEASES, '-inf', NOW)
    for _, o in ipairs(ended) do
        redis.call('hdel', HOLDERS, o)
    end
    if #ended > 0 then
        redis.call('zremrangebyscore', LEASES, '-inf', NOW)
        RECLAIMED = true
    end
    if redis.call('hlen', HOLDERS) ~= redis.call('zcard', LEASES) then
        for _, o in ipairs(redis.call('hkeys', HOLDERS)) do
            if not redis.call('zscore', LEASES, o) then
                redis.call('hdel', HOLDERS, o)
                RECLAIMED = true
            end
        end
        for _, o in ipairs(redis.call('zrange', LEASES, 0, -1)) do
            if redis.call('hexists', HOLDERS, o) == 0 then
                redis.call('zrem', LEASES, o)
            end
        end
    end
    USED = sem_used()
end

-- The permits w asks for: the caller's from its call (sem_want_set),
-- a queued waiter's from the wants hash; nil when unknown.
local function sem_want(w)
    if WANT[w] == nil then
        WANT[w] = tonumber(redis.call('hget', WANTS, w)) or false
    end
    return WANT[w] or nil
end

local function sem_want_set(owner, n)
    WANT[owner] = n
end

-- sem_want_store records a queued owner's ask (HSET only when it changed).
local function sem_want_store(owner, n)
    if tonumber(redis.call('hget', WANTS, owner)) ~= n then
        redis.call('hset', WANTS, owner, n)
    end
    WANT[owner] = n
end

local function sem_want_drop(owner)
    redis.call('hdel', WANTS, owner)
    WANT[owner] = nil
end

-- sem_tidy, at the end of a script: an empty queue keeps no asks (one that
-- a queue reset left behind included).
local function sem_tidy()
    if not q_front() then
        redis.call('del', WANTS)
    end
end

-- The resource interface (res_lock.lua).

local function res_init(_)
end

-- res_free: w could be granted now: the pool is set and w's ask fits in
-- the free permits.
local function res_free(w)
    local n = sem_want(w)
    return POOL ~= nil and n ~= nil and n <= POOL - USED
end

local function res_freed()
end

-- res_doomed: w can never be granted (its ask is over the pool, or not
-- known, or the pool is not set).
local function res_doomed(w)
    local n = sem_want(w)
    return POOL == nil or n == nil or n > POOL
end

local function res_popped(w)
    sem_want_drop(w)
end

local function res_take(owner, lease)
    local n = sem_want(owner)
    redis.call('hset', HOLDERS, owner, n)
    redis.call('zadd', LEASES, NOW + tonumber(lease), owner)
    sem_want_drop(owner)
    USED = USED + n
end

local function res_reenter(_, _)
    return false, false
end

-- The next lease to end, ms from now, or nil when nobody holds.
local function sem_next_end()
    local e = redis.call('zrange', LEASES, 0, 0, 'withscores')
    if e[2] then
        return tonumber(e[2]) - NOW
    end
    return nil
end

-- res_pttl: the base of a new waiter's deadline: the next lease to end, 0
-- when nobody holds.
local function res_pttl()
    return sem_next_end() or 0
end

-- res_blocked: nil when w could be granted now, else until the next lease
-- ends (-1 when none will: only a pool change or a departure, which wake
-- the front, can let w in).
local function res_blocked(w)
    if res_free(w) then
        return nil
    end
    return sem_next_end() or -1
end
