-- scalable_force_unlock.lua: delete a fair lock whoever holds it and wake
-- the head; the scalable engine's fair_force_unlock.lua.
--
-- KEYS[1]  lock hash
-- KEYS[2]  squeue "fairlock_squeue:{name}"
-- KEYS[3]  channel prefix "redisson_lock__channel:{name}"
-- KEYS[4]  "redisson_lock_queue:{name}"   (must not exist: see refuse_mixed)
-- KEYS[5]  "redisson_lock_timeout:{name}" (must not exist)
-- ARGV[1]  unlock message, "0"
-- ARGV[2]  now: client clock, Unix milliseconds
-- ARGV[3]  publish command: "publish" or "spublish"
-- ARGV[4]  head grace in milliseconds (<= 0 turns it off)
--
-- Reply: 1 when a lock was deleted, 0 when there was none; an error reply
-- when the lock's Redisson-compatible keys exist.
local lock, sq = KEYS[1], KEYS[2]
local now, grace = tonumber(ARGV[2]), tonumber(ARGV[4])

local mixed = refuse_mixed(lock, KEYS[4], KEYS[5])
if mixed then
    return mixed
end
prune_stale_heads(sq, now)
if redis.call('del', lock) == 1 then
    hand_over(sq, now, grace, KEYS[3], ARGV[3], ARGV[1])
    return 1
end
return 0
