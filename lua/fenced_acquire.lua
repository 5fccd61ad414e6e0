-- fenced_acquire.lua: take or re-enter a fenced lock and get a fencing
-- token (Redisson RedissonFencedLock tryLockInner with a token). The lock is
-- the reentrant lock's hash: unlock.lua, force_unlock.lua and renew.lua
-- serve it unchanged.
--
-- KEYS[1]  lock hash: field = owner id, value = hold count; PTTL = lease
-- KEYS[2]  token "redisson_lock_token:{name}": a counter, never expires
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner id "<client-uuid>:<thread-id>"
-- KEYS[3]  acquisition latch (not in Redisson; see latch_common.lua)
-- ARGV[3]  latch lifetime in milliseconds (0: no latch)
--
-- Reply, as Redisson's: {-1, token} when ARGV[2] now holds the lock (taken
-- or re-entered: every successful acquisition INCRs the token, re-entries
-- included, and the lease is reset); otherwise {pttl, -1} with the holder's
-- remaining lease (-1 when the key has no expiry). A token is never -1, so
-- the second element alone says which. A later copy of a request that took
-- the lock replies {-1, token} with the token that copy got (the latch holds
-- "held:<token>"), without a second INCR or hold. The INCR runs first: a
-- token key that does not hold an integer makes the script fail before it
-- writes anything, and so does an INCR past 2^53, where tokens stop being
-- exact (not in Redisson; token_incr in latch_common.lua INCRs the key
-- back): an error reply, the key as it was.
local replay = latch_check(KEYS[3], ARGV[3], KEYS[1], ARGV[2])
if replay then
    return replay
end
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local token, refused = token_incr(KEYS[2])
    if not token then
        return refused
    end
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    latch_grant(KEYS[3], ARGV[3], token)
    return {-1, token}
end
return {redis.call('pttl', KEYS[1]), -1}
