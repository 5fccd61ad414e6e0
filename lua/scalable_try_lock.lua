-- scalable_try_lock.lua: one attempt at a fair lock that never queues; the
-- scalable engine's fair_try_lock.lua (same replies, same state changes, in
-- the representation of scalable_common.lua). O(1) commands plus the pruning
-- of stale heads (O(1) each).
--
-- KEYS[1]  lock hash
-- KEYS[2]  squeue "fairlock_squeue:{name}"
-- KEYS[3]  "redisson_lock_queue:{name}"   (must not exist: see refuse_mixed)
-- KEYS[4]  "redisson_lock_timeout:{name}" (must not exist)
-- KEYS[5]  acquisition latch (not in Redisson; see latch_common.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner id
-- ARGV[3]  now: client clock, Unix milliseconds
-- ARGV[4]  the caller's wait slot in milliseconds
-- ARGV[5]  latch lifetime in milliseconds (0: no latch)
--
-- Reply: "OK" when ARGV[2] now holds the lock (taken or re-entered), 1 when
-- not; an error reply when the lock's Redisson-compatible keys exist.
local lock, sq = KEYS[1], KEYS[2]
local owner, now, wait = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

local mixed = refuse_mixed(lock, KEYS[3], KEYS[4])
if mixed then
    return mixed
end
local replay = latch_check(KEYS[5], ARGV[5], KEYS[1], owner)
if replay then
    return replay
end
prune_stale_heads(sq, now)
if take_or_reenter(lock, sq, owner, ARGV[1], wait) then
    latch_grant(KEYS[5], ARGV[5])
    return 'OK'
end
return 1
