-- fair_unlock.lua: release one hold of a fair lock (Redisson RFairLock
-- unlock). Both engines run this body, after their queue operations and
-- fair_common.lua.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue "redisson_lock_queue:{name}"
-- KEYS[3]  timeouts "redisson_lock_timeout:{name}"
-- KEYS[4]  channel prefix "redisson_lock__channel:{name}"
-- KEYS[5]  unlock latch "redisson_unlock_latch:{name}:<request-id>"
-- KEYS[6]  scalable queue "fairlock_squeue:{name}" (not in Redisson)
-- KEYS[7]  head grace "fairlock_grace:{name}" (not in Redisson)
-- KEYS[8]  fencing token "redisson_lock_token:{name}" (the direct handoff)
-- KEYS[9]  acquisition latch prefix (the direct handoff)
--          "fairlock_acquire_latch:{name}" (the head's latch key, kept in
--          its queue node, must start with it and ':')
-- ARGV[1]  unlock message, "0"
-- ARGV[2]  lease in milliseconds to set when holds remain
-- ARGV[3]  owner id
-- ARGV[4]  now: client clock, Unix milliseconds
-- ARGV[5]  publish command: "publish" or "spublish"
-- ARGV[6]  latch lifetime in milliseconds (0 or less: no latch)
-- ARGV[7]  head grace in milliseconds (not in Redisson; <= 0: off)
--
-- Reply: nil when ARGV[3] does not hold the lock, 0 when it still holds it
-- (re-entered), 1 when the lock was released. A retry with the same latch
-- key returns the first reply. Never refused, whatever the other engine
-- keeps: a holder can always release.
-- A release (and, hazard H4, an unlock that finds the lock gone: reply nil,
-- where Redisson replies 1) publishes "0" on the lock's own channel, which
-- wakes reentrant waiters of the same name (not in Redisson; not when the
-- release grants the lock directly, below), and wakes the
-- head of the queue and the waiter behind it (Redisson: the head only),
-- after giving the head its grace; when this engine has no queue, the other
-- engine's head and second are woken. With KEYS[8] and KEYS[9] given and
-- ARGV[7] > 0, the release instead grants the free lock to the live head
-- directly when it can (the scalable engine's head; on the Redisson engine a
-- head of this library's clients, queue_redisson.lua: issue 33) and
-- publishes the grant on its channel (handoff in fair_common.lua); the
-- new first two of the queue are then woken as after the head's own take,
-- with the reply their attempt would get since the lock is held
-- ("s:<sleep ms>:<ahead>", wake_front in fair_common.lua).
local lock, latch = KEYS[1], KEYS[5]
local owner, now, grace = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[7])

-- The outcome is latched for a retry; a latch lifetime of 0 or less
-- (an unlock sent without one) keeps none, rather than failing after the
-- release (SET PX 0 is an error) and leaving the waiters unwoken.
local function latch_outcome(v)
    if tonumber(ARGV[6]) > 0 then
        redis.call('set', latch, v, 'px', ARGV[6])
    end
end

-- The latch was checked by fair_fast_unlock.lua, in front of this body.
fair_init(lock, KEYS[2], KEYS[3], KEYS[6], KEYS[4], KEYS[7], ARGV[5], ARGV[1], true)
local head, head0, second0 = begin()
-- The caller's count, read before prune (which does not write the lock):
-- a count read tells prune the lock is held, with no EXISTS (issue 33).
local held = res_count(owner)
prune(owner, now, head, grace)
local result, freed = nil, false
-- The last hold (a count of '1') is released by deleting the lock, which
-- is what HINCRBY to 0 would lead to (issue 23: one command less).
if not held then
    freed = res_free()
elseif held ~= '1' and redis.call('hincrby', lock, owner, -1) > 0 then
    local pttl = res_pttl()
    redis.call('pexpire', lock, ARGV[2])
    res_written()
    latch_outcome('0')
    result, freed = 0, pttl == -1 or tonumber(ARGV[2]) < pttl
else
    redis.call('del', lock)
    res_freed()
    latch_outcome('1')
    result, freed = 1, true
end
-- A release granted directly publishes nothing on the lock's own channel:
-- the lock is held again, so a reentrant waiter woken there would only
-- fail its take (issue 33: one command less per handoff).
if result ~= 0 and freed and not (KEYS[9] and handoff(owner, q_front(), grace, KEYS[8], KEYS[9])) then
    redis.call(ARGV[5], KEYS[4], ARGV[1])
end
finish(nil, head0, second0, freed, grace)
return result
