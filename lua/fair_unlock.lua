-- fair_unlock.lua: release one hold of a fair lock (Redisson RFairLock unlock).
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue
-- KEYS[3]  timeouts
-- KEYS[4]  channel prefix "redisson_lock__channel:{name}"
-- KEYS[5]  unlock latch "redisson_unlock_latch:{name}:<request-id>"
-- KEYS[6]  scalable queue "fairlock_squeue:{name}" (not in Redisson: refused if it exists)
-- ARGV[1]  unlock message, "0"
-- ARGV[2]  lease in milliseconds to set when holds remain
-- ARGV[3]  owner id
-- ARGV[4]  now: client clock, Unix milliseconds
-- ARGV[5]  publish command: "publish" or "spublish"
-- ARGV[6]  latch lifetime in milliseconds
-- ARGV[7]  head grace in milliseconds (not in Redisson; <= 0 turns it off)
--
-- Reply: nil when ARGV[3] does not hold the lock, 0 when it still holds it
-- (re-entered), 1 when the lock was released and the head (only) woken.
-- A retry with the same latch key returns the first reply.
-- Not in Redisson (hazard H4): when the lock no longer exists at all, the head
-- is still woken but the reply is nil (Redisson replies 1, a silent success).
local lock, queue, timeouts, prefix, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, now, grace = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[7])

local refused = refuse_scalable(KEYS[6], KEYS[1])
if refused then
    return refused
end
local latched = redis.call('get', latch)
if latched then
    return tonumber(latched)
end
prune_stale_heads(queue, timeouts, now)
if redis.call('exists', lock) == 0 then
    hand_over(queue, timeouts, now, grace, prefix, ARGV[5], ARGV[1])
    return nil
end
if redis.call('hexists', lock, owner) == 0 then
    return nil
end
if redis.call('hincrby', lock, owner, -1) > 0 then
    redis.call('pexpire', lock, ARGV[2])
    redis.call('set', latch, '0', 'px', ARGV[6])
    return 0
end
redis.call('del', lock)
redis.call('set', latch, '1', 'px', ARGV[6])
hand_over(queue, timeouts, now, grace, prefix, ARGV[5], ARGV[1])
return 1
