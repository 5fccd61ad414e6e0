-- rw_force_unlock.lua: delete a read-write lock held in one mode, whoever
-- holds it (Redisson RedissonReadLock / RedissonWriteLock forceUnlock).
--
-- KEYS[1]  lock hash
-- KEYS[2]  channel "redisson_rwlock:{name}"
-- ARGV[1]  message: "0" for the read lock, "1" for the write lock
-- ARGV[2]  publish command: "publish" or "spublish"
-- ARGV[3]  the mode this half deletes: "read" or "write" (not in Redisson,
--          whose two halves run two scripts)
--
-- Reply: 1 when the lock was in mode ARGV[3] and was deleted (and ARGV[1]
-- published), else 0. The read holds' timeout keys are left to expire.
if redis.call('hget', KEYS[1], 'mode') == ARGV[3] then
    redis.call('del', KEYS[1])
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
