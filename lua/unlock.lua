-- unlock.lua: release one hold of a reentrant lock (Redisson RLock unlockInner).
--
-- KEYS[1]  lock hash
-- KEYS[2]  lock channel "redisson_lock__channel:{name}"
-- KEYS[3]  unlock latch "redisson_unlock_latch:{name}:<request-id>"
-- ARGV[1]  unlock message, "0"
-- ARGV[2]  lease in milliseconds to set when holds remain
-- ARGV[3]  owner id
-- ARGV[4]  publish command: "publish" or "spublish"
-- ARGV[5]  latch lifetime in milliseconds
-- KEYS[4]  fair queue "redisson_lock_queue:{name}"  (not in Redisson, see below)
-- KEYS[5]  scalable fair queue "fairlock_squeue:{name}" (not in Redisson)
--
-- Reply: nil when ARGV[3] does not hold the lock; 0 when it still holds it
-- (re-entered); 1 when the lock was released and ARGV[1] published. A retried
-- call with the same latch key returns the first call's reply (0 or 1)
-- without running again.
-- Not in Redisson: when fair-lock waiters are queued on the same name (a
-- fair handle waiting behind a reentrant holder), the head of their queue
-- is woken on its own channel too, since it does not listen on KEYS[2].
local latched = redis.call('get', KEYS[3])
if latched == '0' or latched == '1' then
    return tonumber(latched)
end
local count = redis.call('hget', KEYS[1], ARGV[3])
if not count then
    return nil
end
-- The last hold ("1"): the HINCRBY to 0 that Redisson runs before the DEL
-- changes nothing the DEL leaves, so it is skipped (issue 23). Any other
-- value takes Redisson's path, errors included.
local left = 0
if count ~= '1' then
    left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
end
if left > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], '0', 'px', ARGV[5])
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
wake_fair_head(KEYS[4], KEYS[5], KEYS[2], ARGV[4], ARGV[1])
redis.call('set', KEYS[3], '1', 'px', ARGV[5])
return 1
