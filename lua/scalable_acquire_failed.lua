-- scalable_acquire_failed.lua: a waiter gives up and leaves the queue; the
-- scalable engine's fair_acquire_failed.lua (same reply, same state changes,
-- in the representation of scalable_common.lua). O(1) commands: the waiters
-- behind the leaver move one slot earlier through one delta.
--
-- KEYS[1]  squeue "fairlock_squeue:{name}"
-- KEYS[2]  lock hash
-- KEYS[3]  channel prefix "redisson_lock__channel:{name}"
-- KEYS[4]  "redisson_lock_queue:{name}"   (must not exist: see refuse_mixed)
-- KEYS[5]  "redisson_lock_timeout:{name}" (must not exist)
-- ARGV[1]  owner id of the leaver
-- ARGV[2]  the leaver's wait slot in milliseconds
-- ARGV[3]  publish command: "publish" or "spublish"
-- ARGV[4]  unlock message, "0"
--
-- When the leaver was the head and the lock is free, the new head is woken.
-- Reply: nil; an error reply when the lock's Redisson-compatible keys exist.
local sq = KEYS[1]
local owner, wait = ARGV[1], tonumber(ARGV[2])

local mixed = refuse_mixed(KEYS[2], KEYS[4], KEYS[5])
if mixed then
    return mixed
end
local removed, was_head = sq_remove(sq, owner, wait)
if removed and was_head and redis.call('exists', KEYS[2]) == 0 then
    local head = sq_head(sq)
    if head then
        redis.call(ARGV[3], KEYS[3] .. ':' .. head, ARGV[4])
    end
end
return nil
