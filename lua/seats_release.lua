-- seats_release.lua: give back every seat of a hold (the fair multi-seat
-- hold; not in Redisson). Run after latch_common.lua, fair_common.lua and
-- seats_common.lua.
--
-- KEYS[1..8]  as seats_acquire.lua
-- KEYS[9]  release latch "fairlock_seats_release_latch:{T}:<request-id>"
-- ARGV[1]  owner id
-- ARGV[2]  latch lifetime in milliseconds (<= 0: no latch)
-- ARGV[3]  head grace in milliseconds (>= 1)
-- ARGV[4]  publish command
--
-- Reply: 1 when the owner held seats (its lease not ended) and gave them
-- back, 0 when not. Latched: a copy with the same latch key replies the
-- first reply and does nothing. Seats given back (or reclaimed from ended
-- leases) make ready whoever heads all their queues: their graces start
-- and they are woken (seats_common.lua). An error reply (nothing written)
-- on a key of the wrong type or a bad argument.
local owner, latch_ttl, grace = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if not owner or owner == '' or not latch_ttl or not grace or grace < 1 then
    return redis.error_reply('fairlock: seats: bad arguments')
end
seats_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], ARGV[4], grace, false)
-- Every key this script may write is read with a command of its type
-- before the first write: the latch (GET), seats_guard (holds, leases,
-- req, queue, seat, grace; the token key is not written here). A key of
-- another type is an error reply with nothing written.
local latched = redis.pcall('get', KEYS[9])
if type(latched) == 'table' and latched.err then
    return seats_wrong(KEYS[9], latched.err)
end
local bad = seats_guard(owner, nil)
if bad then
    return bad
end
if latched then
    return tonumber(latched)
end
seats_reclaim()
local result = 0
if holds_has(owner) then
    give_back(owner)
    result = 1
end
if latch_ttl > 0 then
    redis.call('set', KEYS[9], result, 'px', latch_ttl)
end
prune_all()
finish_all() -- the release's wake-ups
return result
