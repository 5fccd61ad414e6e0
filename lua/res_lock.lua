-- res_lock.lua: the fair lock's resource, the part of the fair rules that
-- knows what is being granted. It is not a script by itself: package wire
-- puts it in front of fair_common.lua for every fair_*.lua script (and
-- res_sem.lua stands in its place for the fair semaphore's scripts). The
-- interface fair_common.lua uses:
--   res_init(lock)          names the resource's key (fair_init calls it)
--   res_free(w)             whether waiter w could be granted now (the lock:
--                           whether it is free, whoever w is); cached
--   res_freed()             the script deleted the resource (a release)
--   res_doomed(w)           whether w can never be granted (the lock: never)
--   res_popped(w)           w was pruned from the queue
--   res_take(owner, lease)  grant the free resource to owner
--   res_reenter(owner, lease)  a holder asks again: whether it holds now,
--                           and whether the lease got shorter (the waiters
--                           were told the old one)
--   res_pttl()              the base of a new waiter's deadline (the lock:
--                           its PTTL, Redisson's rule, -2 when free)
--   res_blocked(w)          nil when w could be granted now, else how long
--                           until the next event that can let it in (the
--                           lock: its PTTL, -1 no expiry)
--
-- Keys: lock  hash owner -> hold count, PTTL = lease (Redisson's).

local LOCK

-- RES_NOTES: a waiter woken while the lock is held is sent its sleep
-- instead of a wake-up (fair_common.lua's wake_front; to this library's
-- waiters only, q_noted). RES_FREE_NOTES: so is the waiter behind the head
-- when the lock is free and the head's grace runs (issue 33).
local RES_NOTES = true
local RES_FREE_NOTES = true

local function res_init(lock)
    LOCK = lock
end

-- Whether the lock is free (FREE caches it within one script: every write
-- to the lock hash in these scripts sets or clears it; time does not move
-- within a script). It starts from what the fair tryLocks' fast path read
-- (FAST_FREE, fair_token.lua; nil in the other scripts).
local FREE = FAST_FREE

-- PTTL caches the lock's PTTL within one script the same way (nil: not
-- read since the last write to the lock; res_written clears it), starting
-- from what the fast path read (FAST_PTTL).
local PTTL = FAST_PTTL

-- res_pttl: the lock's PTTL (-2: no lock), the base of a new waiter's
-- deadline (Redisson's rule); read once until the script writes the lock.
local function res_pttl()
    if PTTL == nil then
        PTTL = redis.call('pttl', LOCK)
    end
    return PTTL
end

-- res_written: the script wrote the lock's hash or its expiry itself.
local function res_written()
    PTTL = nil
end

local function res_free(_)
    if FREE == nil then
        FREE = redis.call('exists', LOCK) == 0
    end
    return FREE
end

-- res_count: owner's hold count as the hash keeps it, nil when it holds
-- none; a count read means the lock is not free (fair_unlock.lua: one HGET
-- instead of an EXISTS and an HGET).
local function res_count(owner)
    local n = redis.call('hget', LOCK, owner)
    if n then
        FREE = false
    end
    return n or nil
end

-- res_freed: the script deleted the lock hash.
local function res_freed()
    FREE, PTTL = true, -2
end

local function res_doomed(_)
    return false
end

local function res_popped(_)
end

-- The lease just set stands for the lock's PTTL for the rest of the
-- script (a PTTL read would be less by the script's time since, under a
-- millisecond): the notes after a grant read none (issue 33).
local function res_take(owner, lease)
    redis.call('hset', LOCK, owner, 1)
    redis.call('pexpire', LOCK, lease)
    local ms = tonumber(lease)
    FREE, PTTL = false, ms and ms > 0 and ms or nil
end

local function res_reenter(owner, lease)
    if redis.call('hexists', LOCK, owner) == 1 then
        local pttl = res_pttl()
        redis.call('hincrby', LOCK, owner, 1)
        redis.call('pexpire', LOCK, lease)
        res_written()
        return true, pttl == -1 or tonumber(lease) < pttl
    end
    return false, false
end

local function res_blocked(_)
    if FREE then
        return nil -- known free in this script: no PTTL to read
    end
    local pttl = res_pttl()
    if pttl == -2 then
        return nil
    end
    return pttl
end
