-- fair_acquire_failed.lua: a waiter gives up and leaves the queue
-- (Redisson RFairLock acquireFailed). Both engines run this body, after
-- their queue operations and fair_common.lua.
--
-- KEYS[1]  queue "redisson_lock_queue:{name}"
-- KEYS[2]  timeouts "redisson_lock_timeout:{name}"
-- KEYS[3]  lock hash                                  (not in Redisson)
-- KEYS[4]  channel prefix "redisson_lock__channel:{name}" (not in Redisson)
-- KEYS[5]  scalable queue "fairlock_squeue:{name}"    (not in Redisson)
-- KEYS[6]  head grace "fairlock_grace:{name}"         (not in Redisson)
-- ARGV[1]  owner id of the leaver
-- ARGV[2]  the leaver's wait slot in milliseconds: the same one it queued with
-- ARGV[3]  publish command: "publish" or "spublish"   (not in Redisson)
-- ARGV[4]  wake-up message, "0"                       (not in Redisson)
-- ARGV[5]  head grace in milliseconds (<= 0: off)     (not in Redisson)
--
-- Every waiter behind the leaver gets its deadline lowered by the leaver's
-- slot (the slot is no longer ahead of them). Safe to repeat: a second run
-- finds the owner gone and changes nothing. Never refused, whatever the
-- other engine keeps: a waiter can always leave.
-- Not in Redisson: the waiters that move into the first two places are
-- woken, and a new head of a free lock gets its grace.
-- Reply: nil.
local owner, wait = ARGV[1], tonumber(ARGV[2])

fair_init(KEYS[3], KEYS[1], KEYS[2], KEYS[5], KEYS[4], KEYS[6], ARGV[3], ARGV[4], true)
local _, head0, second0 = begin()
q_remove(owner, wait)
finish(nil, head0, second0, false, tonumber(ARGV[5]))
return nil
