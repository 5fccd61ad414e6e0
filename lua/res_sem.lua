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

local HOLDERS, LEASES, PERMITS, QUEUE_KEY, WANTS, GRACE_KEY
-- RES_NOTES (fair_common.lua's wake_front): a waiter woken while the head
-- cannot be granted is sent the sleep and place an attempt would reply
-- ("s:<sleep ms>:<ahead>", res_blocked below) instead of a plain wake-up:
-- its attempt would change nothing (issue 33: after a grant, the new head
-- and the waiter behind it, woken because they moved up, each ran one).
local RES_NOTES = true
-- RES_FREE_NOTES: the lock's note to the waiter behind the head of a free
-- lock (wake_front) is not the semaphore's: its waiters there run an attempt.
local RES_FREE_NOTES = false
local NOW       -- the server clock, Unix ms
local POOL      -- the pool, nil when not set
local USED      -- permits held by holders whose lease has not ended
local RECLAIMED -- this script reclaimed expired holders
local WANT = {} -- owner -> permits asked (false: none stored)
local WANTS_NONE -- the wants hash is known to be absent (sem_guard)
-- The holders and leases as sem_load read them, kept in step with every
-- write to the two keys below: HOLD owner -> the holders field as stored
-- (a string), LEASE owner -> lease end (a number). ENDED: the owners
-- whose lease had ended at NOW (reclaimed by sem_reclaim).
local HOLD, LEASE, ENDED = {}, {}, {}

local function sem_type(key)
    local t = redis.call('type', key)
    if type(t) == 'table' then
        t = t.ok
    end
    return t
end

local function sem_wrong(key, err)
    return redis.error_reply('fairlock: semaphore key ' .. key .. ' holds the wrong type: ' .. tostring(err))
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

-- sem_used sums the permits of the holders whose lease has not ended
-- (O(holders), at most the pool), from the tables sem_load read: what is
-- held once sem_reclaim has run.
local function sem_used()
    local live = {}
    for o, v in pairs(HOLD) do
        local s = LEASE[o]
        if s and not ENDED[o] then
            live[#live + 1] = v
        end
    end
    local used = 0
    for _, v in ipairs(live) do
        used = used + sem_count(v)
    end
    return used
end

-- sem_score: a zset score as a number ("inf" and "-inf" included).
local function sem_score(v)
    local s = tonumber(v)
    if s then
        return s
    end
    if string.sub(v, 1, 1) == '-' then
        return -math.huge
    end
    return math.huge
end

-- sem_load reads the holders and the leases whole (two commands,
-- O(holders)); a key of the wrong type is an error reply (nothing is
-- written before it: every script calls sem_init first). Returns an error
-- reply, or nil.
local function sem_load()
    local h = redis.pcall('hgetall', HOLDERS)
    if h.err then
        return sem_wrong(HOLDERS, h.err)
    end
    local l = redis.pcall('zrange', LEASES, 0, -1, 'withscores')
    if l.err then
        return sem_wrong(LEASES, l.err)
    end
    for i = 1, #h, 2 do
        HOLD[h[i]] = h[i + 1]
    end
    for i = 1, #l, 2 do
        local o, s = l[i], sem_score(l[i + 1])
        LEASE[o] = s
        if s <= NOW then
            ENDED[o] = true
        end
    end
    USED = sem_used()
    return nil
end

-- sem_init names the keys, reads the clock and the pool, and loads the
-- holders and the leases (sem_load). Writes nothing. checked: also check
-- the type of all seven keys (TYPE, one command each), as the scripts off
-- the hot path do; the hot scripts (acquire, release) instead read every
-- key they may write with a command of its type before they write
-- anything (sem_guard; see docs/design.md). Returns an error reply, or
-- nil.
local function sem_init(holders, leases, permits, queue, wants, grace_key, token, checked)
    HOLDERS, LEASES, PERMITS, QUEUE_KEY, WANTS, GRACE_KEY = holders, leases, permits, queue, wants, grace_key
    local t = redis.call('time')
    NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if checked then
        local want = {[holders] = 'hash', [leases] = 'zset', [permits] = 'string', [queue] = 'hash',
            [wants] = 'hash', [grace_key] = 'string', [token] = 'string'}
        for _, key in ipairs({holders, leases, permits, queue, wants, grace_key, token}) do
            local got = sem_type(key)
            if got ~= 'none' and got ~= want[key] then
                return redis.error_reply('fairlock: semaphore key ' .. key .. ' holds a ' .. got .. ', not a ' .. want[key])
            end
        end
    end
    local p = redis.pcall('get', permits)
    if type(p) == 'table' and p.err then
        return sem_wrong(permits, p.err)
    end
    if p then
        -- a count SetPermits could have written: at most 18 digits, so that
        -- a value beyond int64 (damage) is not read as a huge pool
        if not string.match(p, '^%d+$') or #p > 18 then
            return redis.error_reply('fairlock: semaphore permits key ' .. permits .. ' does not hold an integer >= 0')
        end
        POOL = tonumber(p)
    end
    return sem_load()
end

-- sem_holds: whether owner holds permits whose lease has not ended
-- (read-only: an ended lease counts as gone before it is reclaimed).
local function sem_holds(owner)
    local score = LEASE[owner]
    return score ~= nil and score > NOW and HOLD[owner] ~= nil
end

-- sem_reclaim removes the holders whose lease has ended, a holder with no
-- lease and a lease with no holder (neither of which any script writes),
-- then counts USED. Only writes when it finds one.
local function sem_reclaim()
    local ended = false
    for o in pairs(ENDED) do
        ended = true
        if HOLD[o] then
            redis.call('hdel', HOLDERS, o)
            HOLD[o] = nil
        end
        LEASE[o] = nil
    end
    if ended then
        redis.call('zremrangebyscore', LEASES, '-inf', NOW)
        RECLAIMED = true
    end
    ENDED = {}
    for o in pairs(HOLD) do
        if not LEASE[o] then
            redis.call('hdel', HOLDERS, o)
            HOLD[o] = nil
            RECLAIMED = true
        end
    end
    for o in pairs(LEASE) do
        if not HOLD[o] then
            redis.call('zrem', LEASES, o)
            LEASE[o] = nil
        end
    end
    USED = sem_used()
end

-- sem_drop: owner's holders field and lease go (a release, a give-back).
local function sem_drop(owner)
    redis.call('hdel', HOLDERS, owner)
    redis.call('zrem', LEASES, owner)
    HOLD[owner], LEASE[owner] = nil, nil
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
        WANTS_NONE = false
    end
    WANT[owner] = n
end

local function sem_want_drop(owner)
    redis.call('hdel', WANTS, owner)
    WANT[owner] = nil
end

-- SEM_KEEP: how long the holders and leases keys outlive the last lease
-- end (docs/design.md, "Key lifetimes"): the default latch lifetime, so
-- that no copy of a call in flight finds its owner's entries gone before
-- its latch. SEM_QUEUE_KEEP: how long the queue and asks keys outlive the
-- last moment a waiter is known to matter: longer than a live waiter's
-- sleep past it (a client sleeps at most its lease, 30 s by default, when
-- no lease will end).
local SEM_KEEP = 10000
local SEM_QUEUE_KEEP = 60000

-- sem_keep gives key the life until the instant ends (deleted when that
-- has passed: its entries mean nothing any more).
local function sem_keep(key, ends)
    local ms = ends - NOW
    if ms > 0 then
        redis.call('pexpire', key, int_str(ms))
    else
        redis.call('del', key)
    end
end

-- sem_expire gives the holders and the leases the latest lease end plus
-- SEM_KEEP (a function of the entries alone; the renewal and the claim of
-- a handed-off grant move it: sem_expire_holders, which returns that
-- latest end), and
-- the queue and the asks, when anyone is queued, SEM_QUEUE_KEEP past the
-- latest of: the tail's deadline (the latest: each waiter's is its
-- predecessor's plus its slot), the end of the head's grace (the grace
-- key's PTTL less grace_margin), the latest lease end (a waiter sleeps at
-- most until the next lease end) and now plus this call's grace (grace;
-- <= 0: off). A waiter is not pruned while it is not the head, whatever
-- its deadline, so a live waiter's next call, within its sleep, must find
-- the queue: every call moves the end on. After every client is gone (no
-- release, no leave) the keys end by themselves. The pool and the token
-- counter are the semaphore itself: never given a TTL here.
local function sem_expire_holders()
    local last = nil
    for _, s in pairs(LEASE) do
        if not last or s > last then
            last = s
        end
    end
    if last == math.huge then
        last = nil -- damage: no TTL rather than a wrong one
    end
    if last then
        sem_keep(HOLDERS, last + SEM_KEEP)
        sem_keep(LEASES, last + SEM_KEEP)
    end
    return last
end

local function sem_expire(grace_margin, grace)
    local last = sem_expire_holders()
    local tail, td = q_tail()
    if tail and td then
        local ends = math.max(td, NOW + math.max(0, grace or 0), last or td)
        local g = redis.call('pttl', GRACE_KEY)
        if g > 0 then
            ends = math.max(ends, NOW + g - grace_margin)
        end
        sem_keep(QUEUE_KEY, ends + SEM_QUEUE_KEEP)
        sem_keep(WANTS, ends + SEM_QUEUE_KEEP)
    end
end

-- sem_tidy(GRACE_MARGIN, grace), at the end of every script that writes
-- (grace: the call's head grace): an empty queue keeps no asks (one that
-- a queue reset left behind included; the DEL is skipped when the hash is
-- known to be absent), and every key with entries gets its bounded life
-- (sem_expire).
local function sem_tidy(grace_margin, grace)
    if not q_front() and not WANTS_NONE then
        redis.call('del', WANTS)
    end
    sem_expire(grace_margin, grace)
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

-- res_take: owner's ask is dropped from the wants hash only when the
-- queue is not empty now: every script that takes ends with sem_tidy,
-- which deletes the whole hash when the queue is empty.
local function res_take(owner, lease)
    local n = sem_want(owner)
    local ends = NOW + tonumber(lease)
    redis.call('hset', HOLDERS, owner, n)
    redis.call('zadd', LEASES, ends, owner)
    HOLD[owner], LEASE[owner] = int_str(n), ends
    if q_front() then
        sem_want_drop(owner)
    else
        WANT[owner] = nil
    end
    USED = USED + n
end

local function res_reenter(_, _)
    return false, false
end

-- The next lease to end, ms from now, or nil when nobody holds.
-- (The leases as loaded and kept in step: after sem_reclaim, the zset's
-- first member.)
local function sem_next_end()
    local first = nil
    for _, s in pairs(LEASE) do
        if not first or s < first then
            first = s
        end
    end
    if first then
        return first - NOW
    end
    return nil
end

-- res_pttl: the base of a new waiter's deadline: the next lease to end, 0
-- when nobody holds.
local function res_pttl()
    return sem_next_end() or 0
end

-- res_blocked: nil when the front of the queue could be granted now (w
-- when nobody is queued), else until the next lease ends (-1 when none
-- will: only a pool change or a departure, which wake the front, can let
-- anyone in). Asked for the head (reply), or for the head or the waiter
-- behind it (wake_front's notes): what a queued waiter's attempt replies
-- depends on the head alone (fair_common.lua's reply), so a note to the
-- waiter behind the head is its attempt's reply even when its own ask
-- would fit (it is not the head: it could not be granted).
local function res_blocked(w)
    if res_free(q_front() or w) then
        return nil
    end
    return sem_next_end() or -1
end

-- sem_guard, in the hot scripts (acquire, release) before they write
-- anything: the queue and the wants hash are of their types. The queue is
-- read with HMGET (its head, and whether owner is queued: owner nil for
-- none); then the wants hash: with a head, the head's ask (HGET, kept for
-- sem_want: prune and finish read it anyway); without, its length (HLEN:
-- when it is absent, sem_tidy skips its DEL). Every other key a hot script writes was read with a
-- command of its type by sem_init (holders, leases, pool), token_check
-- (token) or the script (its latch), or is written only with commands
-- that take any type (the grace key: GET under pcall, SET, DEL; PUBLISH).
-- Returns whether owner is queued (as HEXISTS would say), then an error
-- reply or nil.
local function sem_guard(owner)
    local v = redis.pcall('hmget', QUEUE_KEY, 'h', 'n:' .. (owner or ''))
    if v.err then
        return false, sem_wrong(QUEUE_KEY, v.err)
    end
    local head = v[1]
    if head then
        local got = redis.pcall('hget', WANTS, head)
        if type(got) == 'table' and got.err then
            return false, sem_wrong(WANTS, got.err)
        end
        if WANT[head] == nil then
            WANT[head] = tonumber(got) or false
        end
    else
        local got = redis.pcall('hlen', WANTS)
        if type(got) == 'table' and got.err then
            return false, sem_wrong(WANTS, got.err)
        end
        WANTS_NONE = got == 0
    end
    return v[2] ~= false and v[2] ~= nil, nil
end
