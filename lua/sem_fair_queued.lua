-- sem_fair_queued.lua: whether a queued waiter of a fair semaphore is
-- behind the first two places, with no grant or other latch for its
-- request (not in Redisson; issue 33). Read-only, and standalone: none of
-- the shared parts is prepended (it costs a few commands, no more).
--
-- KEYS[1]  queue "fairlock_sem_queue:{name}" (queue_scalable.lua's hash)
-- KEYS[2]  the request's acquisition latch
--          "fairlock_sem_acquire_latch:{name}:<request-id>"
-- ARGV[1]  owner id
--
-- Reply: 1 when the owner is queued, neither the head nor the waiter right
-- behind it, and its request has no latch; 0 otherwise (or when a key
-- holds another type). A waiter's client asks it instead of an attempt
-- right after subscribing to its channel, when its attempt just before
-- queued it: only a message sent in between could be lost, and the
-- scripts send a waiter a message only as the head or the waiter behind it
-- (a wake-up, a note, a doomed head's wake-up), or as a grant (which
-- writes its latch). On 1 nothing was lost: the attempt's reply stands.
-- On 0 the client makes the attempt (sem_fair_acquire.lua).
local latch = redis.pcall('exists', KEYS[2])
if type(latch) ~= 'number' or latch ~= 0 then
    return 0
end
local v = redis.pcall('hmget', KEYS[1], 'h', 'p:' .. ARGV[1])
if v.err then
    return 0
end
local head, prev = v[1], v[2]
if type(head) ~= 'string' or type(prev) ~= 'string' or prev == '' or prev == head then
    return 0
end
return 1
