-- scalable_unlock.lua: release one hold of a fair lock; the scalable engine's
-- fair_unlock.lua (same replies, same state changes, in the representation
-- of scalable_common.lua).
--
-- KEYS[1]  lock hash
-- KEYS[2]  squeue "fairlock_squeue:{name}"
-- KEYS[3]  channel prefix "redisson_lock__channel:{name}"
-- KEYS[4]  unlock latch "redisson_unlock_latch:{name}:<request-id>"
-- KEYS[5]  "redisson_lock_queue:{name}"   (must not exist: see refuse_mixed)
-- KEYS[6]  "redisson_lock_timeout:{name}" (must not exist)
-- ARGV[1]  unlock message, "0"
-- ARGV[2]  lease in milliseconds to set when holds remain
-- ARGV[3]  owner id
-- ARGV[4]  now: client clock, Unix milliseconds
-- ARGV[5]  publish command: "publish" or "spublish"
-- ARGV[6]  latch lifetime in milliseconds
-- ARGV[7]  head grace in milliseconds (<= 0 turns it off)
--
-- Reply: nil when ARGV[3] does not hold the lock (when the lock does not
-- exist at all the head is still woken), 0 when it still holds it, 1 when
-- the lock was released and the head woken. A retry with the same latch key
-- returns the first reply. An error reply when the lock's
-- Redisson-compatible keys exist.
local lock, sq, prefix, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, now, grace = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[7])

local mixed = refuse_mixed(lock, KEYS[5], KEYS[6])
if mixed then
    return mixed
end
local latched = redis.call('get', latch)
if latched then
    return tonumber(latched)
end
prune_stale_heads(sq, now)
if redis.call('exists', lock) == 0 then
    hand_over(sq, now, grace, prefix, ARGV[5], ARGV[1])
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
hand_over(sq, now, grace, prefix, ARGV[5], ARGV[1])
return 1
