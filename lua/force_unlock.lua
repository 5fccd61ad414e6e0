-- force_unlock.lua: delete a reentrant lock whoever holds it (Redisson forceUnlock).
--
-- KEYS[1]  lock hash
-- KEYS[2]  lock channel
-- ARGV[1]  unlock message, "0"
-- ARGV[2]  publish command: "publish" or "spublish"
--
-- Reply: 1 when a lock was deleted (and ARGV[1] published), 0 when there was none.
if redis.call('del', KEYS[1]) == 1 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
