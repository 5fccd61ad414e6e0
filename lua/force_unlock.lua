-- force_unlock.lua: delete a reentrant lock whoever holds it (Redisson forceUnlock).
--
-- KEYS[1]  lock hash
-- KEYS[2]  lock channel
-- ARGV[1]  unlock message, "0"
-- ARGV[2]  publish command: "publish" or "spublish"
-- KEYS[3]  fair queue "redisson_lock_queue:{name}"  (not in Redisson: its head is woken too)
-- KEYS[4]  scalable fair queue "fairlock_squeue:{name}" (not in Redisson: its head is woken too)
--
-- Reply: 1 when a lock was deleted (and ARGV[1] published), 0 when there was none.
if redis.call('del', KEYS[1]) == 1 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    wake_fair_head(KEYS[3], KEYS[4], KEYS[2], ARGV[2], ARGV[1])
    return 1
end
return 0
