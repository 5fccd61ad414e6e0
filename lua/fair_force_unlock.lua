-- fair_force_unlock.lua: delete a fair lock whoever holds it (Redisson
-- RFairLock forceUnlock). Both engines run this body, after their queue
-- operations and fair_common.lua.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue "redisson_lock_queue:{name}"
-- KEYS[3]  timeouts "redisson_lock_timeout:{name}"
-- KEYS[4]  channel prefix "redisson_lock__channel:{name}"
-- KEYS[5]  scalable queue "fairlock_squeue:{name}" (not in Redisson)
-- KEYS[6]  head grace "fairlock_grace:{name}" (not in Redisson)
-- ARGV[1]  unlock message, "0"
-- ARGV[2]  now: client clock, Unix milliseconds
-- ARGV[3]  publish command: "publish" or "spublish"
-- ARGV[4]  head grace in milliseconds (not in Redisson; <= 0: off)
--
-- Reply: 1 when a lock was deleted, 0 when there was none. Never refused,
-- whatever the other engine keeps. A deletion wakes as a release does (see
-- fair_unlock.lua).
local lock = KEYS[1]

fair_init(lock, KEYS[2], KEYS[3], KEYS[5], KEYS[4], KEYS[6], ARGV[3], ARGV[1], true)
local head, head0, second0 = begin()
prune(nil, tonumber(ARGV[2]), head, tonumber(ARGV[4]))
local deleted = redis.call('del', lock) == 1
res_freed()
if deleted then
    redis.call(ARGV[3], KEYS[4], ARGV[1])
end
finish(nil, head0, second0, deleted, tonumber(ARGV[4]))
if deleted then
    return 1
end
return 0
