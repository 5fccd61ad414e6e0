-- scalable_try_lock_wait.lua: take a fair lock, or join / stay in its queue;
-- the scalable engine's fair_try_lock_wait.lua (same replies, same state
-- changes, in the representation of scalable_common.lua). O(1) commands plus
-- the pruning of stale heads (O(1) each).
--
-- KEYS[1]  lock hash
-- KEYS[2]  squeue "fairlock_squeue:{name}"
-- KEYS[3]  "redisson_lock_queue:{name}"   (must not exist: see refuse_mixed)
-- KEYS[4]  "redisson_lock_timeout:{name}" (must not exist)
-- KEYS[5]  acquisition latch (not in Redisson; see latch_common.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner id
-- ARGV[3]  the caller's wait slot in milliseconds
-- ARGV[4]  now: client clock, Unix milliseconds
-- ARGV[5]  head grace in milliseconds (<= 0 turns it off)
-- ARGV[6]  latch lifetime in milliseconds (0: no latch)
--
-- Reply: as fair_try_lock_wait.lua: "OK" when ARGV[2] holds the lock,
-- otherwise the milliseconds to wait before trying again; an error reply when
-- the lock's Redisson-compatible keys exist.
local lock, sq = KEYS[1], KEYS[2]
local owner, wait = ARGV[2], tonumber(ARGV[3])
local now, grace = tonumber(ARGV[4]), tonumber(ARGV[5])

local mixed = refuse_mixed(lock, KEYS[3], KEYS[4])
if mixed then
    return mixed
end
local replay = latch_check(KEYS[5], ARGV[6], KEYS[1], owner)
if replay then
    return replay
end
prune_stale_heads(sq, now)
if take_or_reenter(lock, sq, owner, ARGV[1], wait) then
    latch_grant(KEYS[5], ARGV[6])
    return 'OK'
end

local pttl = redis.call('pttl', lock)
local me = redis.call('hmget', sq, 'p:' .. owner, 'h')
if me[1] then
    if pttl ~= -2 then
        -- The waiter right behind the head re-checks at least every grace.
        if grace > 0 and (pttl < 0 or pttl > grace) and me[1] == me[2] then
            return grace
        end
        return pttl
    end
    local _, deadline = clamp_head(sq, now, grace)
    return math.max(1, deadline - now)
end

-- Join at the tail: one slot after the tail's deadline, or one slot after
-- the lease ends when nobody is queued.
local ttl = pttl
local td = redis.call('hget', sq, 'td')
if td then
    ttl = tonumber(td) - now
end
sq_append(sq, owner, ttl + wait + now)
return ttl
