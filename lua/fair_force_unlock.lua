-- fair_force_unlock.lua: delete a fair lock whoever holds it and wake the
-- head (Redisson RFairLock forceUnlock).
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue
-- KEYS[3]  timeouts
-- KEYS[4]  channel prefix "redisson_lock__channel:{name}"
-- KEYS[5]  scalable queue "fairlock_squeue:{name}" (not in Redisson: refused if it exists)
-- ARGV[1]  unlock message, "0"
-- ARGV[2]  now: client clock, Unix milliseconds
-- ARGV[3]  publish command: "publish" or "spublish"
-- ARGV[4]  head grace in milliseconds (not in Redisson; <= 0 turns it off)
--
-- Reply: 1 when a lock was deleted, 0 when there was none.
local lock, queue, timeouts = KEYS[1], KEYS[2], KEYS[3]
local now, grace = tonumber(ARGV[2]), tonumber(ARGV[4])

local refused = refuse_scalable(KEYS[5], KEYS[1])
if refused then
    return refused
end
prune_stale_heads(queue, timeouts, now)
if redis.call('del', lock) == 1 then
    hand_over(queue, timeouts, now, grace, KEYS[4], ARGV[3], ARGV[1])
    return 1
end
return 0
