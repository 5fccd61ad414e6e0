-- fair_fast_unlock.lua: the latch check and the fast path of a fair release
-- (issue 23), in front of fair_unlock.lua (both engines). It is not a
-- script by itself: package wire puts it after latch_common.lua and
-- fair_token.lua and before the engine's queue operations, the resource and
-- fair_common.lua, so that the release of a lock held once with nothing
-- queued returns before the rest of the script's functions are defined
-- (defining them costs about as much Redis time as the release's commands).
--
-- KEYS and ARGV are fair_unlock.lua's: KEYS[1] lock, KEYS[2] queue,
-- KEYS[3] timeouts, KEYS[4] channel, KEYS[5] unlock latch, KEYS[6] scalable
-- queue, KEYS[7] grace; ARGV[1] message, ARGV[3] owner, ARGV[5] publish
-- command, ARGV[6] latch lifetime.
--
-- A retry with the same latch key returns the first reply (here for both
-- paths). When none of the queue keys of either engine and the grace key
-- exists and the caller holds the lock once, the full path has nobody to
-- prune, grant, wake or give a grace, and no grace key to delete: it would
-- delete the lock, latch 1, publish the unlock message on the lock's
-- channel and reply 1, which is what the fast path does, for one EXISTS
-- and one HGET instead of the full path's five reads. Otherwise the script
-- goes on with the full path; FAST_QUEUED (the EXISTS count) spares its
-- begin the same EXISTS when no queue key exists (a re-entered hold). A
-- release with a queue costs one EXISTS more than before.
-- TestFastPathsMatchFullPaths (propertytests) compares the two paths.
local latched = redis.call('get', KEYS[5])
if latched then
    return tonumber(latched)
end
FAST_QUEUED = redis.call('exists', KEYS[2], KEYS[3], KEYS[6], KEYS[7])
if FAST_QUEUED == 0 and redis.call('hget', KEYS[1], ARGV[3]) == '1' then
    redis.call('del', KEYS[1])
    if tonumber(ARGV[6]) > 0 then
        redis.call('set', KEYS[5], '1', 'px', ARGV[6])
    end
    redis.call(ARGV[5], KEYS[4], ARGV[1])
    return 1
end
