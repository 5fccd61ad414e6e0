-- fair_token.lua: the fencing token of the fair lock, the fair semaphore and
-- the multi-seat hold. It is not a script by itself: package wire puts it
-- right after latch_common.lua in front of every script that runs
-- fair_common.lua, so the fair lock's fast path (fair_fast_take.lua), which
-- runs before the queue operations and the rules are defined, can use it too.

-- FAST_FREE is whether the lock is free as fair_fast_take.lua read it (nil
-- when it did not run: every script but the fair tryLocks, and the fair
-- semaphore and seats, which never set it). res_lock.lua starts its cache
-- from it, so an attempt that leaves the fast path because the lock is held
-- does not read the lock twice. Declared here, in front of every script
-- that composes res_lock.lua.
local FAST_FREE

-- FAST_PTTL is the lock's PTTL as fair_fast_take.lua read it (-2: no lock;
-- nil when it did not run); res_lock.lua starts its PTTL cache from it.
local FAST_PTTL

-- FAST_QUEUED is what fair_fast_unlock.lua read in a release: how many of
-- the queue keys of both engines and the grace key exist (nil in every
-- other script); begin (fair_common.lua) reuses it instead of reading the
-- same keys.
local FAST_QUEUED

-- The fencing token (not in Redisson's fair lock; the key is its fenced
-- lock's "redisson_lock_token:{name}", so both share one sequence). A take
-- (the hold count is now 1) INCRs it; a re-entry returns the holder's
-- current token, INCRing only when the key holds none (deleted by hand, or
-- the hold was taken by a version without tokens). token_check runs before
-- anything is written, so a key that cannot be INCRed fails the script
-- before the take: a value that is not an integer, or a token at the end
-- of the exact range (2^53, latch_common.lua's token_bound) when the
-- caller is not the holder (lock, owner: the lock hash and the caller; a
-- caller that passes none, the fair semaphore and the seats, always
-- takes), or past it.
local TOKEN -- the token key's value as token_check read it (nil: none)

local function token_check(key, lock, owner)
    local v = redis.pcall('get', key)
    if type(v) == 'table' and v.err then
        return redis.error_reply('fairlock: fencing token key ' .. key .. ': ' .. v.err)
    end
    -- What INCR takes: a decimal int64 without leading zeros, below the
    -- maximum (where INCR would overflow).
    local digits = v and string.match(v, '^-?(%d+)$')
    if v and (not digits or #digits > 19 or (#digits == 19 and digits >= '9223372036854775807')
            or (#digits > 1 and string.sub(digits, 1, 1) == '0')) then
        return redis.error_reply('fairlock: fencing token key ' .. key .. ' does not hold an integer INCR can move')
    end
    local bound = token_bound(v)
    if bound == 'over' or (bound == 'end' and not (lock and redis.call('hexists', lock, owner) == 1)) then
        return token_refusal(key, v)
    end
    TOKEN = tonumber(v)
    return nil
end

-- fair_token, after take_or_reenter granted the lock (fresh: a take, not a
-- re-entry) and token_check read the key.
local function fair_token(key, fresh)
    if not fresh and TOKEN and TOKEN > 0 then
        return TOKEN
    end
    return redis.call('incr', key)
end
