-- seats_acquire.lua: take a set of seats all at once, or join (stay in)
-- the queue of every one of them (the fair multi-seat hold; not in
-- Redisson). Run after latch_common.lua, fair_common.lua and
-- seats_common.lua (which states the keys and the rules).
--
-- KEYS[1]  holds "fairlock_seats:{T}"
-- KEYS[2]  leases "fairlock_seats_lease:{T}"
-- KEYS[3]  seat holders "fairlock_seats_seat:{T}"
-- KEYS[4]  requests "fairlock_seats_req:{T}"
-- KEYS[5]  queues "fairlock_seats_queue:{T}"
-- KEYS[6]  graces "fairlock_seats_grace:{T}"
-- KEYS[7]  fencing token counter "fairlock_seats_token:{T}"
-- KEYS[8]  channel prefix "fairlock_seats__channel:{T}"; a waiter listens
--          on "<prefix>:<owner>"
-- KEYS[9]  acquisition latch "fairlock_seats_acquire_latch:{T}:<request-id>"
-- KEYS[10..]  the seats, 1 to 64 distinct names of venue T. They are also
--          the names of locks that must not be held (checked with EXISTS,
--          never written): a name is a seat or a lock, not both.
-- ARGV[1]  lease in milliseconds (>= 1), on the server's clock
-- ARGV[2]  owner id (no '|')
-- ARGV[3]  latch lifetime in milliseconds (0: no latch)
-- ARGV[4]  head grace in milliseconds (>= 1; the seats have no grace-off mode)
-- ARGV[5]  publish command: "publish" or "spublish"
-- ARGV[6]  1: join or stay in the queues when not granted; 0: one try that
--          never queues
-- ARGV[7]  optional, "1": reply the caller's queue position when it is
--          queued and not granted (see the replies)
--
-- Replies:
--   {1, token}  granted: the owner holds every seat until now + lease;
--               token INCRed from the venue's counter. A later copy of the
--               request (same latch) while the grant lasts: the same reply;
--               one that finds no latch (expired) while the owner holds
--               these seats: {1, a new token}, latched (an owner id is one
--               acquisition's: the hold is this request's).
--   {0, sleep}  not granted (queued in every queue when ARGV[6] is 1): how
--               long the caller may sleep, ms (>= 1; a wake-up may come
--               sooner)
--   {0, sleep, ahead, joined}  the same when ARGV[6] and ARGV[7] are "1":
--               ahead the requests that must leave (granted and gone, gave
--               up, pruned) before the caller heads every queue it is in:
--               the distinct owners ahead of it in any of its seats'
--               queues (exact; O(the positions walked), at most 64 queues
--               of the caller); joined 1 when this call put the caller at
--               the tail of its queues.
--   errors (nothing written): "fairlock: seats: bad arguments", "... owner
--   already holds seats" (other seats), "... owner is queued for other seats", "... seat
--   <s> is also the name of a held lock", the latch's "acquisition request
--   abandoned" / "already granted and its hold is over", a key of the
--   wrong type, a token key that is not an integer.
local lease, owner, latch_ttl, grace = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local queue = ARGV[6] == '1'
local want_position = queue and ARGV[7] == '1'
local seats = {}
for i = 10, #KEYS do
    seats[#seats + 1] = KEYS[i]
end
if not lease or lease < 1 or not latch_ttl or not grace or grace < 1 or not owner or owner == ''
    or string.find(owner, '|', 1, true) or #seats < 1 or #seats > 64 then
    return redis.error_reply('fairlock: seats: bad arguments')
end
local named = {}
for _, s in ipairs(seats) do
    if named[s] then
        return redis.error_reply('fairlock: seats: bad arguments (seat ' .. s .. ' named twice)')
    end
    named[s] = true
end
seats_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], ARGV[5], grace, false)
-- Every key this script may write is read with a command of its type
-- before the first write: seats_guard (holds, leases, req, queue, seat,
-- grace), token_check (token), the latch's GET. A key of another type is
-- an error reply with nothing written.
local bad = seats_guard(owner, seats)
if bad then
    return bad
end
bad = token_check(KEYS[7])
if bad then
    return bad
end
if latch_ttl > 0 then
    local state = redis.pcall('get', KEYS[9])
    if type(state) == 'table' and state.err then
        return seats_wrong(KEYS[9], state.err)
    end
    if state == 'void' or state == 'void:held' then
        return redis.error_reply('fairlock: acquisition request abandoned')
    end
    local token = latch_token(state)
    if token then
        if seats_holds(owner) then
            return {1, token}
        end
        return redis.error_reply('fairlock: acquisition request already granted and its hold is over')
    end
end
if seats_holds(owner) then
    -- An owner id is one acquisition's (package multi makes a fresh one for
    -- each), so a live hold of these very seats is this request's own, met
    -- by a copy that found no latch (it expired: Redis was away longer than
    -- it lives). Replied as the grant with a new token (the first is not
    -- known any more; a new one is larger than every token before it) and
    -- latched again: refusing it left the seats held by nobody until their
    -- lease ended (issue 30 item 2).
    local mine = rec(owner)
    local same = mine and #mine == #seats
    for _, s in ipairs(mine or {}) do
        same = same and named[s] == true
    end
    if not same then
        return redis.error_reply('fairlock: seats: owner already holds seats')
    end
    local again = fair_token(KEYS[7], true)
    latch_grant(KEYS[9], latch_ttl, again)
    return {1, again}
end
if redis.call('exists', unpack(seats)) > 0 then -- one EXISTS; which one only on the error path
    for _, s in ipairs(seats) do
        if redis.call('exists', s) == 1 then
            return redis.error_reply('fairlock: seats: seat ' .. s .. ' is also the name of a held lock; a name is a seat or a lock, not both')
        end
    end
end
local mine = rec(owner)
if mine and not holds_has(owner) then
    local same = #mine == #seats
    for _, s in ipairs(mine) do
        same = same and named[s] == true
    end
    if not same then
        return redis.error_reply('fairlock: seats: owner is queued for other seats')
    end
end

S_CALLER = owner
seats_reclaim()
mine = rec(owner)
local queued = mine ~= nil
if queued and not queued_in_all(owner, mine) then
    leave_all(owner) -- missing from a queue: leave all, join all again below
    queued = false
end
for _, s in ipairs(seats) do
    work(s)
end
prune_all()
if can_take(owner, seats) then
    if queued then
        leave_all(owner)
    end
    take(owner, seats, lease)
    local token = fair_token(KEYS[7], true)
    latch_grant(KEYS[9], latch_ttl, token)
    finish_all()
    return {1, token}
end
-- Not granted: nothing was written yet (a grant is the only write before
-- here when seats_guard left the grace hash unread), and joining then
-- finish_all may write the grace hash: it is read first.
bad = seats_grace_guard()
if bad then
    return bad
end
local joined = 0
if queue and not queued then
    join_all(owner, seats)
    joined = 1
end
finish_all()
if want_position then
    return {0, seats_reply(owner, seats), seats_ahead(owner, seats), joined}
end
return {0, seats_reply(owner, seats)}
