-- fair_try_lock.lua: one attempt at a fair lock that never queues
-- (Redisson RFairLock tryLock() with no arguments).
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue "redisson_lock_queue:{name}"
-- KEYS[3]  timeouts "redisson_lock_timeout:{name}"
-- KEYS[4]  scalable queue "fairlock_squeue:{name}" (not in Redisson: refused if it exists)
-- KEYS[5]  acquisition latch (not in Redisson; see latch_common.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner id
-- ARGV[3]  now: client clock, Unix milliseconds   (note: 3 and 4 are swapped
-- ARGV[4]  the caller's wait slot in milliseconds   relative to fair_try_lock_wait)
-- ARGV[5]  latch lifetime in milliseconds (0: no latch)
--
-- Reply: "OK" when ARGV[2] now holds the lock (taken or re-entered; Redisson
-- replies nil, see acquire.lua), 1 when not. A free lock with a live waiter queued is not taken: the queue goes first.
local lock, queue, timeouts = KEYS[1], KEYS[2], KEYS[3]
local owner, now, wait = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

local refused = refuse_scalable(KEYS[4], KEYS[1])
if refused then
    return refused
end
local replay = latch_check(KEYS[5], ARGV[5], KEYS[1], owner)
if replay then
    return replay
end
prune_stale_heads(queue, timeouts, now)
if take_or_reenter(lock, queue, timeouts, owner, ARGV[1], wait) then
    latch_grant(KEYS[5], ARGV[5])
    return 'OK'
end
return 1
