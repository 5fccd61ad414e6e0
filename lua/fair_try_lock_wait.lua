-- fair_try_lock_wait.lua: take a fair lock, or join / stay in its queue
-- (Redisson RFairLock tryLock with a wait, used by every waiting form).
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue
-- KEYS[3]  timeouts
-- KEYS[4]  scalable queue "fairlock_squeue:{name}" (not in Redisson: refused if it exists)
-- KEYS[5]  acquisition latch (not in Redisson; see latch_common.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner id
-- ARGV[3]  the caller's wait slot in milliseconds
-- ARGV[4]  now: client clock, Unix milliseconds
-- ARGV[5]  head grace in milliseconds (not in Redisson; <= 0 turns it off)
-- ARGV[6]  latch lifetime in milliseconds (0: no latch)
--
-- Reply: "OK" when ARGV[2] now holds the lock (Redisson: nil, see
-- acquire.lua). Otherwise the milliseconds to
-- wait before trying again (a message on the owner's channel may come first):
--   - newly queued: the time until the waiter ahead of it runs out (its
--     deadline - now), or the lock's PTTL when nobody is ahead;
--   - already queued, lock held: the lock's PTTL (-1: no expiry, wait for a
--     message); but at most the grace for the waiter right behind the head
--     (not in Redisson), so that a dead head is noticed within about two
--     graces of the lock's release rather than a lease later;
--   - already queued, lock free (someone else is head): the time until the
--     head's deadline, at least 1, after giving the head its grace. Redisson
--     returns 0 here and its waiters poll in a loop (hazard H2).
local lock, queue, timeouts = KEYS[1], KEYS[2], KEYS[3]
local owner, wait = ARGV[2], tonumber(ARGV[3])
local now, grace = tonumber(ARGV[4]), tonumber(ARGV[5])

local refused = refuse_scalable(KEYS[4], KEYS[1])
if refused then
    return refused
end
local replay = latch_check(KEYS[5], ARGV[6], KEYS[1], owner)
if replay then
    return replay
end
prune_stale_heads(queue, timeouts, now)
if take_or_reenter(lock, queue, timeouts, owner, ARGV[1], wait) then
    latch_grant(KEYS[5], ARGV[6])
    return 'OK'
end

local pttl = redis.call('pttl', lock)
if redis.call('zscore', timeouts, owner) then
    if pttl ~= -2 then
        -- The waiter right behind the head re-checks at least every grace:
        -- if the head is dead, it is the one to notice and prune it.
        if grace > 0 and (pttl < 0 or pttl > grace) and redis.call('lindex', queue, 1) == owner then
            return grace
        end
        return pttl
    end
    local _, deadline = clamp_head(queue, timeouts, now, grace)
    return math.max(1, deadline - now)
end

-- Join at the tail: this waiter's deadline is one slot after the tail's,
-- or one slot after the lease ends when nobody with a deadline is ahead.
local ttl = pttl
local tail = redis.call('lindex', queue, -1)
if tail and tail ~= owner then
    local tail_deadline = redis.call('zscore', timeouts, tail)
    if tail_deadline then
        ttl = tonumber(tail_deadline) - now
    end
end
if redis.call('zadd', timeouts, ttl + wait + now, owner) == 1 then
    redis.call('rpush', queue, owner)
end
return ttl
