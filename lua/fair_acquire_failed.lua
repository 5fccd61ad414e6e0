-- fair_acquire_failed.lua: a waiter gives up and leaves the queue
-- (Redisson RFairLock acquireFailed).
--
-- KEYS[1]  queue
-- KEYS[2]  timeouts
-- KEYS[3]  lock hash                 (not in Redisson: see below)
-- KEYS[4]  channel prefix "redisson_lock__channel:{name}"
-- KEYS[5]  scalable queue "fairlock_squeue:{name}" (not in Redisson: refused if it exists)
-- ARGV[1]  owner id of the leaver
-- ARGV[2]  the leaver's wait slot in milliseconds: the same one it queued with
-- ARGV[3]  publish command: "publish" or "spublish"
-- ARGV[4]  unlock message, "0"
--
-- Every waiter behind the leaver gets its deadline lowered by the leaver's
-- slot (the slot is no longer ahead of them). Safe to repeat: a second run
-- finds the owner gone and changes nothing.
-- Not in Redisson: when the leaver was the head and the lock is free, the new
-- head is woken, since no unlock is coming to wake it.
-- Reply: nil.
local queue, timeouts = KEYS[1], KEYS[2]
local owner, wait = ARGV[1], tonumber(ARGV[2])

local refused = refuse_scalable(KEYS[5], KEYS[3])
if refused then
    return refused
end
local waiters = redis.call('lrange', queue, 0, -1)
local behind = false
for _, waiter in ipairs(waiters) do
    if behind then
        redis.call('zincrby', timeouts, -wait, waiter)
    elseif waiter == owner then
        behind = true
    end
end
redis.call('zrem', timeouts, owner)
redis.call('lrem', queue, 0, owner)

if waiters[1] == owner and redis.call('exists', KEYS[3]) == 0 then
    local head = redis.call('lindex', queue, 0)
    if head then
        redis.call(ARGV[3], KEYS[4] .. ':' .. head, ARGV[4])
    end
end
return nil
