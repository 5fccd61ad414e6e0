-- acquire.lua: take or re-enter a reentrant lock (Redisson RLock tryLockInner).
--
-- KEYS[1]  lock hash: field = owner id, value = hold count; the key's PTTL is the lease
-- ARGV[1]  lease in milliseconds (the explicit lease, or the watchdog lease)
-- ARGV[2]  owner id "<client-uuid>:<thread-id>"
-- KEYS[2]  acquisition latch (not in Redisson; see latch_common.lua)
-- ARGV[3]  latch lifetime in milliseconds (0: no latch)
--
-- Reply: "OK" when the lock is now held by ARGV[2] (fresh or re-entered; the
-- lease is reset to ARGV[1] either way), otherwise the holder's remaining lease
-- in milliseconds (-1 when the key has no expiry). Redisson replies nil for
-- success; go-redis turns a nil reply into an error whose handling costs about
-- 20 allocations per call, so our scripts reply "OK" instead. Only the caller
-- reads the reply: nothing stored in Redis differs.
local replay = latch_check(KEYS[2], ARGV[3], KEYS[1], ARGV[2])
if replay then
    return replay
end
-- Redisson reads EXISTS, then HEXISTS, then PTTL for the reply; the PTTL
-- read first tells a free lock too (-2: no key), so a take that fails runs
-- two reads instead of three (issue 33). The reply is the same.
local pttl = redis.call('pttl', KEYS[1])
if pttl == -2 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    latch_grant(KEYS[2], ARGV[3])
    return 'OK'
end
return pttl
