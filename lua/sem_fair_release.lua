-- sem_fair_release.lua: give back the permits an owner holds (not in
-- Redisson). Run after latch_common.lua, queue_scalable.lua, res_sem.lua
-- and fair_common.lua.
--
-- KEYS[1..8]  as sem_fair_acquire.lua
-- KEYS[9]  release latch "fairlock_sem_release_latch:{name}:<request-id>"
-- ARGV[1]  owner id
-- ARGV[2]  latch lifetime in milliseconds (<= 0: no latch)
-- ARGV[3]  head grace in milliseconds (<= 0: off)
-- ARGV[4]  publish command: "publish" or "spublish"
-- ARGV[5]  the acquisition latches' prefix
--          "fairlock_sem_acquire_latch:{name}" (optional: without it no
--          direct handoff)
--
-- Reply: 1 when the owner held permits (its lease not ended) and gave them
-- back, 0 when it held none (never granted, released, or its lease ended).
-- The reply is latched: a copy of the call with the same latch key replies
-- the first reply and does nothing, so a late copy never releases a later
-- grant of the same owner. Permits given back (or reclaimed from ended
-- leases) wake the head of the queue and the waiter behind it; with
-- ARGV[5] and the caller's grace on, they are first granted directly to
-- the heads that fit and joined with a handoff note (issue 33): each such
-- head leaves the queue (those behind it drop by its slot), holds its ask
-- until now + min(its lease, 2 * grace), the token is INCRed, its
-- acquisition latch becomes 'granted:<token>' (for max(its latch life,
-- that grant)), and "g:<token>:<granted ms>:<request id>" is published on
-- its channel; the first copy of its request then claims the grant
-- (sem_fair_acquire.lua). Not granted (it takes the permits itself, as
-- before): a head joined without a latch, whose latch exists (given up),
-- or whose token INCR fails or would pass 2^53. An error
-- reply (nothing written) when a key it uses holds the wrong type (read
-- before anything is written: sem_init, sem_guard, the latch's GET); the
-- token key is not used, and a grace key of another type is deleted.
local owner, grace = ARGV[1], tonumber(ARGV[3])
if not grace or not tonumber(ARGV[2]) then
    return redis.error_reply('fairlock: semaphore: bad arguments')
end
local bad = sem_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], false)
if bad then
    return bad
end
local latched = redis.call('get', KEYS[9])
if latched then
    return tonumber(latched)
end
local _
_, bad = sem_guard(nil)
if bad then
    return bad
end
-- Nothing was written above; every key written below was read with a
-- command of its type above (sem_guard).
fair_init(KEYS[1], nil, nil, KEYS[4], KEYS[8], KEYS[6], ARGV[4], '0', false)
local head, head0, second0 = begin()
sem_reclaim()
prune(owner, NOW, head, grace)
local result = 0
local n = tonumber(HOLD[owner])
if n then
    sem_drop(owner)
    USED = USED - n
    result = 1
end
if tonumber(ARGV[2]) > 0 then
    redis.call('set', KEYS[9], result, 'px', ARGV[2])
end
-- Direct handoff (issue 33; fair_common.lua's handoff): while the head fits
-- in the free permits, joined with a note and its request not given up,
-- the permits are granted to it here, for min(its lease, 2 graces), and
-- the grant published on its channel; its client returns on the message
-- without an attempt. The first head that does not fit stops it (FIFO).
if ARGV[5] then
    local h = q_front()
    while h and handoff(owner, h, grace, KEYS[7], ARGV[5]) do
        h = q_front()
    end
end
finish(nil, head0, second0, result == 1 or RECLAIMED, grace)
sem_tidy(GRACE_MARGIN, grace)
return result
