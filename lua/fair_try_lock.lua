-- fair_try_lock.lua: one attempt at a fair lock that never queues
-- (Redisson RFairLock tryLock() with no arguments). Both engines run this
-- body, after their queue operations and fair_common.lua.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue "redisson_lock_queue:{name}"
-- KEYS[3]  timeouts "redisson_lock_timeout:{name}"
-- KEYS[4]  scalable queue "fairlock_squeue:{name}" (not in Redisson)
-- KEYS[5]  fencing token "redisson_lock_token:{name}" (not in Redisson's
--          fair lock: its fenced lock's token key, see fair_token)
-- KEYS[6]  acquisition latch (not in Redisson; see latch_common.lua)
-- KEYS[7]  channel prefix "redisson_lock__channel:{name}" (not in Redisson)
-- KEYS[8]  head grace "fairlock_grace:{name}" (not in Redisson)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner id
-- ARGV[3]  now: client clock, Unix milliseconds   (Redisson's order: 3 and 4 are
-- ARGV[4]  the caller's wait slot in milliseconds   swapped relative to fair_try_lock_wait)
-- ARGV[5]  latch lifetime in milliseconds (0: no latch)
-- ARGV[6]  head grace in milliseconds (not in Redisson; <= 0: off)
-- ARGV[7]  publish command: "publish" or "spublish" (not in Redisson)
-- ARGV[8]  wake-up message, "0" (not in Redisson)
--
-- Reply: {-1, token} when ARGV[2] now holds the lock (taken or re-entered;
-- Redisson replies nil), with the holder's fencing token (fair_token); 1
-- when not. A later copy of a request that took the lock replies the same
-- token (latch_common.lua). A free lock with a live waiter
-- queued is not taken: the queue goes first. An error reply when the other
-- fair engine keeps this lock's queue.
local owner, now, wait, grace = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[6])

fair_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[7], KEYS[8], ARGV[7], ARGV[8], false)
local refused, no_grace = q_refuse(KEYS[1], KEYS[8])
if refused then
    return refused
end
local replay = latch_check(KEYS[6], ARGV[5], KEYS[1], owner)
if replay then
    return replay
end
local bad_token = token_check(KEYS[5], KEYS[1], owner)
if bad_token then
    return bad_token
end
local head, head0, second0 = begin(no_grace)
head = prune(owner, now, head, grace)
local held, cut, fresh = take_or_reenter(owner, ARGV[1], wait, head)
local token
if held then
    token = fair_token(KEYS[5], fresh)
    latch_grant(KEYS[6], ARGV[5], token)
end
finish(nil, head0, second0, cut, grace)
if held then
    return {-1, token}
end
return 1
