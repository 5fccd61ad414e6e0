-- seats_common.lua: the fair multi-seat hold (not in Redisson; issue 22),
-- shared by the seats_*.lua scripts. It is not a script by itself: package
-- wire prepends latch_common.lua (the latch states), fair_common.lua (its
-- token_check, fair_token and wake are reused; nothing else of it runs
-- here) and this file to every seats_*.lua body, so each script stays one
-- atomic EVAL. docs/design.md, "The fair multi-seat hold", states the rules.
--
-- A request asks for a set of seats of one venue (the seats' common hash
-- tag {T}; every key below carries it, so one cluster slot). Keys:
--   holds   hash "fairlock_seats:{T}": holder -> number of seats it holds
--   leases  zset "fairlock_seats_lease:{T}": holder -> lease end (server
--           clock, TIME, Unix ms)
--   seat    hash "fairlock_seats_seat:{T}": seat -> its holder
--   req     hash "fairlock_seats_req:{T}": owner -> its seats (a JSON
--           array), while it is queued or holds
--   queue   hash "fairlock_seats_queue:{T}": every seat's queue, a doubly
--           linked list: "h|<seat>", "t|<seat>" the head and the tail;
--           "n|<owner>|<seat>", "p|<owner>|<seat>" the next and previous
--           owner ("" at the ends). Owners never contain '|'.
--   grace   hash "fairlock_seats_grace:{T}": ready waiter -> the end of its
--           grace (server clock); "+<end>" for its second grace
--   token   string "fairlock_seats_token:{T}": the fencing-token counter
-- and the wake-up channel prefix "fairlock_seats__channel:{T}" (a waiter
-- listens on "<prefix>:<owner>").
--
-- The rules:
--   - a request joins the queue of every seat it names in one script, and
--     leaves them only all at once (granted, gave up, pruned); one found
--     missing from any of its queues leaves all and joins all again. So all
--     queues hold their requests in one total order (arrival);
--   - ready: a queued request heads every queue it is in and every one of
--     its seats is free (no holder; holders whose lease ended are reclaimed
--     first by every script);
--   - a caller is granted when it is ready, or when it is not queued, every
--     queue of its seats is empty and every seat is free: all its seats at
--     once, one lease, one token;
--   - a ready request has a grace: whoever finds it ready without one
--     starts it, whoever finds it run out starts the second; a second grace
--     that ran out prunes it (from all its queues). Never the caller;
--   - wake-ups: when a request's grace (first or second) starts, it is
--     woken, and so is the waiter right behind it in each of its queues; at
--     most once each per script, never the caller of an acquisition.
-- Every script examines the seats it acts on (a worklist): the caller's,
-- the seats of holds it reclaims or releases, and the seats of every
-- waiter it removes; the work is O(those seats), never the queues' length.

local S_HOLDS, S_LEASES, S_SEAT, S_REQ, S_QUEUE, S_GRACE
local S_NOW      -- the server's clock, Unix ms
local S_GRACE_MS -- the head grace, ms
local S_CALLER   -- the acquisition's owner: never pruned, never woken
local S_REC = {} -- owner -> its seats (false: none), read once
local S_WORK, S_SEEN = {}, {} -- the seats to examine, in order
local S_WOKEN = {}
local S_BUDGET   -- removals left (a bound on every loop); nil until needed
local S_REQ_DELTA = 0 -- requests fields added minus removed by this script
-- Read once, kept in step with every write below (nil: not read yet):
local S_HEADS = {}  -- seat -> the head of its queue (false: empty)
local S_HOLDER = {} -- seat -> its holder (false: free)
local S_HELD = {}   -- owner -> its holds field (false: none)
local S_ENDED       -- the holders whose lease ended at S_NOW (seats_guard)
local S_GRACE_NONE  -- the grace hash is known to be empty (seats_guard)

local function seats_type(key)
    local t = redis.call('type', key)
    if type(t) == 'table' then
        t = t.ok
    end
    return t
end

-- seats_init names the keys and the wake-up channel and reads the clock
-- (once per script). checked: also check the types of the venue's seven
-- keys (TYPE, one command each), as the scripts off the hot path do; the
-- hot scripts (acquire, release) call seats_guard instead. Returns an
-- error reply, or nil. Writes nothing.
local function seats_init(holds, leases, seat, req, queue, grace_key, token, channel, pubcmd, grace, checked)
    S_HOLDS, S_LEASES, S_SEAT, S_REQ, S_QUEUE, S_GRACE = holds, leases, seat, req, queue, grace_key
    CHANNEL, PUBCMD, MESSAGE = channel, pubcmd, '0' -- fair_common.lua's wake()
    S_GRACE_MS = grace
    local t = redis.call('time')
    S_NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if not checked then
        return nil
    end
    local want = {[holds] = 'hash', [leases] = 'zset', [seat] = 'hash', [req] = 'hash', [queue] = 'hash',
        [grace_key] = 'hash', [token] = 'string'}
    for _, key in ipairs({holds, leases, seat, req, queue, grace_key, token}) do
        local got = seats_type(key)
        if got ~= 'none' and got ~= want[key] then
            return redis.error_reply('fairlock: seats key ' .. key .. ' holds a ' .. got .. ', not a ' .. want[key])
        end
    end
    return nil
end

-- budget: the removals left. It is the number of requests when the script
-- started, plus one (HLEN, read at the first need: a script that removes
-- nobody does not read it).
local function budget()
    if not S_BUDGET then
        S_BUDGET = redis.call('hlen', S_REQ) - S_REQ_DELTA + 1
    end
    return S_BUDGET
end

-- The seats of owner o (queued or holding), or nil.
local function rec(o)
    local r = S_REC[o]
    if r == nil then
        r = false
        local v = redis.call('hget', S_REQ, o)
        if v then
            local ok, d = pcall(cjson.decode, v)
            if ok and type(d) == 'table' and #d > 0 then
                r = d
            end
        end
        S_REC[o] = r
    end
    return r or nil
end

local function rec_set(o, seats)
    S_REQ_DELTA = S_REQ_DELTA + redis.call('hset', S_REQ, o, cjson.encode(seats))
    S_REC[o] = seats
end

local function rec_del(o)
    S_REQ_DELTA = S_REQ_DELTA - redis.call('hdel', S_REQ, o)
    S_REC[o] = false
end

-- holds_has: whether o has a holds field (as HEXISTS would say).
local function holds_has(o)
    local v = S_HELD[o]
    if v == nil then
        v = redis.call('hget', S_HOLDS, o) or false
        S_HELD[o] = v
    end
    return v ~= false
end

-- seat_holder: the holder of seat s, or nil.
local function seat_holder(s)
    local v = S_HOLDER[s]
    if v == nil then
        v = redis.call('hget', S_SEAT, s) or false
        S_HOLDER[s] = v
    end
    return v or nil
end

-- work adds seat s to the seats this script examines.
local function work(s)
    if not S_SEEN[s] then
        S_SEEN[s] = true
        S_WORK[#S_WORK + 1] = s
    end
end

-- The queues.
local function q_head_of(s)
    local h = S_HEADS[s]
    if h == nil then
        h = redis.call('hget', S_QUEUE, 'h|' .. s) or false
        S_HEADS[s] = h
    end
    return h or nil
end

-- the owner after o in s's queue ("" for the tail), nil when o is not in it
local function q_next_of(s, o)
    return redis.call('hget', S_QUEUE, 'n|' .. o .. '|' .. s) or nil
end

local function q_push(s, o)
    local t = redis.call('hget', S_QUEUE, 't|' .. s)
    if t then
        redis.call('hset', S_QUEUE, 'n|' .. t .. '|' .. s, o, 't|' .. s, o, 'p|' .. o .. '|' .. s, t, 'n|' .. o .. '|' .. s, '')
    else
        redis.call('hset', S_QUEUE, 'h|' .. s, o, 't|' .. s, o, 'p|' .. o .. '|' .. s, '', 'n|' .. o .. '|' .. s, '')
        S_HEADS[s] = o
    end
end

-- q_unlink takes o out of s's queue; false when it was not in it.
local function q_unlink(s, o)
    local v = redis.call('hmget', S_QUEUE, 'p|' .. o .. '|' .. s, 'n|' .. o .. '|' .. s)
    local p, n = v[1], v[2]
    if not p or not n then
        return false
    end
    redis.call('hdel', S_QUEUE, 'p|' .. o .. '|' .. s, 'n|' .. o .. '|' .. s)
    if p == '' and n == '' then
        redis.call('hdel', S_QUEUE, 'h|' .. s, 't|' .. s)
        S_HEADS[s] = false
    elseif p == '' then
        redis.call('hset', S_QUEUE, 'h|' .. s, n, 'p|' .. n .. '|' .. s, '')
        S_HEADS[s] = n
    elseif n == '' then
        redis.call('hset', S_QUEUE, 't|' .. s, p, 'n|' .. p .. '|' .. s, '')
    else
        redis.call('hset', S_QUEUE, 'n|' .. p .. '|' .. s, n, 'p|' .. n .. '|' .. s, p)
    end
    return true
end

-- whether o is in the queue of every seat in seats
local function queued_in_all(o, seats)
    for _, s in ipairs(seats) do
        if not q_next_of(s, o) then
            return false
        end
    end
    return true
end

-- join_all: o joins the queue of each of its seats, at the tail, in this
-- one script.
local function join_all(o, seats)
    for _, s in ipairs(seats) do
        if not q_next_of(s, o) then
            q_push(s, o)
        end
    end
    rec_set(o, seats)
end

-- leave_all: o leaves every queue it is in, and its grace goes.
local function leave_all(o)
    local seats = rec(o)
    if seats then
        for _, s in ipairs(seats) do
            q_unlink(s, o)
            work(s)
        end
    end
    rec_del(o)
    redis.call('hdel', S_GRACE, o)
end

-- seats_holds: whether o holds seats whose lease has not ended (read-only).
local function seats_holds(o)
    if not holds_has(o) then
        return false
    end
    local e = redis.call('zscore', S_LEASES, o)
    return e ~= false and e ~= nil and tonumber(e) > S_NOW
end

-- give_back frees the seats holder o holds.
local function give_back(o)
    local seats = rec(o)
    if seats then
        local mine = {}
        for _, s in ipairs(seats) do
            if seat_holder(s) == o then
                mine[#mine + 1] = s
                S_HOLDER[s] = false
            end
            work(s)
        end
        if #mine > 0 then
            redis.call('hdel', S_SEAT, unpack(mine))
        end
    end
    redis.call('hdel', S_HOLDS, o)
    redis.call('zrem', S_LEASES, o)
    S_HELD[o] = false
    rec_del(o)
end

-- seats_reclaim gives back the seats of every holder whose lease ended
-- (in order of lease end, then owner), as seats_guard listed them (read
-- here in the scripts that do not call it).
local function seats_reclaim()
    local ended = S_ENDED or redis.call('zrangebyscore', S_LEASES, '-inf', S_NOW)
    S_ENDED = {}
    for _, o in ipairs(ended) do
        give_back(o)
    end
end

-- ready: o is queued, heads the queue of every seat it names, and every one
-- of its seats is free.
local function ready(o)
    local seats = rec(o)
    if not seats or holds_has(o) then
        return false
    end
    for _, s in ipairs(seats) do
        if q_head_of(s) ~= o or seat_holder(s) then
            return false
        end
    end
    return true
end

-- can_take: owner is ready, or is not queued while every queue of its
-- seats is empty and every seat free.
local function can_take(owner, seats)
    for _, s in ipairs(seats) do
        local h = q_head_of(s)
        if seat_holder(s) or (h and h ~= owner) then
            return false
        end
    end
    return true
end

-- take: owner holds all its seats until now + lease.
local function take(owner, seats, lease)
    local fields = {}
    for _, s in ipairs(seats) do
        fields[#fields + 1] = s
        fields[#fields + 1] = owner
        S_HOLDER[s] = owner
    end
    redis.call('hset', S_SEAT, unpack(fields))
    redis.call('hset', S_HOLDS, owner, #seats)
    S_HELD[owner] = tostring(#seats)
    redis.call('zadd', S_LEASES, S_NOW + lease, owner)
    rec_set(owner, seats)
end

-- o's grace: its end and whether it is the second, or nil.
local function grace_get(o)
    if S_GRACE_NONE then
        return nil, false
    end
    local v = redis.call('hget', S_GRACE, o)
    if not v then
        return nil, false
    end
    local second = string.sub(v, 1, 1) == '+'
    if second then
        v = string.sub(v, 2)
    end
    return tonumber(v), second
end

-- prune_all: for every seat examined, drop dead heads (never the caller):
-- a head whose second grace ran out while it is ready, or a stray entry
-- with no request behind it. A pruned waiter leaves all its queues, whose
-- seats are examined in turn.
local function prune_all()
    local i = 1
    while i <= #S_WORK do
        local s = S_WORK[i]
        local h = q_head_of(s)
        while h and h ~= S_CALLER and budget() > 0 do
            local seats = rec(h)
            if seats then
                if not ready(h) then
                    break
                end
                local e, second = grace_get(h)
                if not (e and second and e <= S_NOW) then
                    break
                end
                leave_all(h)
            end
            q_unlink(s, h)
            S_BUDGET = S_BUDGET - 1
            h = q_head_of(s)
        end
        i = i + 1
    end
end

-- SEATS_KEEP: how long the venue's keys outlive the last moment any of
-- their entries matters (docs/design.md, "Key lifetimes"), ms: longer
-- than a live waiter's sleep past it (a grace).
local SEATS_KEEP = 60000

-- seats_expire, at the end of every script that writes (finish_all):
-- the venue's six keys (holds, leases, seat, req, queue, grace) end
-- SEATS_KEEP after the latest of: the latest lease end, the latest grace
-- end, now plus this call's grace when anyone is queued (a live waiter
-- calls again within its sleep, at most a lease left, a grace left or one
-- grace), and now. seats_renew.lua moves the end with the lease it moves.
-- After every client is gone (no release, no leave) the keys end by
-- themselves; the token counter is the venue's: never given a TTL.
local function seats_expire()
    local ends = S_NOW
    local last = redis.call('zrange', S_LEASES, -1, -1, 'withscores')
    if last[2] then
        ends = math.max(ends, tonumber(last[2]) or ends)
    end
    local keys = {S_HOLDS, S_LEASES, S_SEAT, S_REQ, S_QUEUE, S_GRACE}
    if not S_GRACE_NONE then
        -- a grace key of another type (damage a script that does not need
        -- the graces leaves alone) is neither read nor given a TTL
        local g = redis.pcall('hvals', S_GRACE)
        if g.err then
            keys[6] = nil
        else
            for _, v in ipairs(g) do
                ends = math.max(ends, tonumber((string.gsub(v, '^%+', ''))) or ends)
            end
        end
    end
    if redis.call('exists', S_QUEUE) == 1 then
        ends = math.max(ends, S_NOW + S_GRACE_MS)
    end
    local ms = ends + SEATS_KEEP - S_NOW
    if ms < math.huge then
        ms = int_str(ms)
        for _, k in ipairs(keys) do
            redis.call('pexpire', k, ms)
        end
    end
end

local function wake_once(o)
    if o and o ~= '' and o ~= S_CALLER and not S_WOKEN[o] then
        S_WOKEN[o] = true
        wake(o)
    end
end

-- finish_all: for every seat examined, a ready head without a grace gets
-- its first, one whose first ran out its second; either start wakes it and
-- the waiter behind it in each of its queues. A head that is not ready
-- keeps no grace.
local function finish_all()
    for _, s in ipairs(S_WORK) do
        local h = q_head_of(s)
        if h then
            if ready(h) then
                local e, second = grace_get(h)
                local start
                if not e then
                    start = ''
                elseif not second and e <= S_NOW then
                    start = '+'
                end
                if start then
                    redis.call('hset', S_GRACE, h, start .. (S_NOW + S_GRACE_MS))
                    S_GRACE_NONE = false
                    wake_once(h)
                    for _, t in ipairs(rec(h)) do
                        wake_once(q_next_of(t, h))
                    end
                end
            else
                redis.call('hdel', S_GRACE, h)
            end
        end
    end
    seats_expire()
end

-- seats_reply: how long caller o, not granted, may sleep: the least, over
-- its seats, of the holder's lease left, the grace left of a ready head
-- ahead of it, or one grace for a head that is not ready; at least 1.
local function seats_reply(o, seats)
    local best
    for _, s in ipairs(seats) do
        local b
        local holder = seat_holder(s)
        if holder then
            b = (tonumber(redis.call('zscore', S_LEASES, holder)) or S_NOW) - S_NOW
        else
            local h = q_head_of(s)
            if h and h ~= o then
                b = grace_get(h) or (S_NOW + S_GRACE_MS)
                b = b - S_NOW
            end
        end
        if b and (not best or b < best) then
            best = b
        end
    end
    return math.max(1, best or 1)
end

-- seats_ahead: how many distinct owners are ahead of o in the queues of
-- its seats (read-only; -1 when o is in none of them). Each queue is
-- walked from o towards its head through the "p|" links.
local function seats_ahead(o, seats)
    local seen, n, found = {}, 0, false
    for _, s in ipairs(seats) do
        local p = redis.call('hget', S_QUEUE, 'p|' .. o .. '|' .. s)
        if p then
            found = true
        end
        while p and p ~= '' do
            if not seen[p] then
                seen[p] = true
                n = n + 1
            end
            p = redis.call('hget', S_QUEUE, 'p|' .. p .. '|' .. s)
        end
    end
    if not found then
        return -1
    end
    return n
end

local function seats_wrong(key, err)
    return redis.error_reply('fairlock: seats key ' .. key .. ' holds the wrong type: ' .. tostring(err))
end

-- seats_grace_guard reads the grace hash's length (HLEN: whether it is
-- empty), once per script. Returns an error reply, or nil.
local S_GRACE_READ = false
local function seats_grace_guard()
    if S_GRACE_READ then
        return nil
    end
    S_GRACE_READ = true
    local v = redis.pcall('hlen', S_GRACE)
    if type(v) == 'table' and v.err then
        return seats_wrong(S_GRACE, v.err)
    end
    S_GRACE_NONE = v == 0
    return nil
end

-- seats_guard, in the hot scripts (acquire, release) before they write
-- anything, instead of seven TYPE checks: every venue key the script may
-- write is read here with a command of its type, so a key of another type
-- is an error reply with nothing written, and what is read is kept for
-- the script (holders, heads, ended leases: no command reads it again).
-- owner: the caller; seats: the seats whose heads and holders to read
-- (the caller's; the release passes nil and reads the owner's own). The
-- reads: HGET holds owner, ZRANGEBYSCORE of the ended leases (what
-- seats_reclaim gives back), HGET req owner (rec), one HMGET of the
-- queue's heads, one HMGET of the seats' holders, HLEN grace (unless
-- nothing can touch the grace hash before a later seats_grace_guard: see
-- the end). The other
-- keys: the token key is read by token_check (acquire) and not written by
-- the release; a latch is read with GET before anything is written (and
-- written with SET, which takes any type). Returns an error reply, or nil.
local function seats_guard(owner, seats)
    local v = redis.pcall('hget', S_HOLDS, owner)
    if type(v) == 'table' and v.err then
        return seats_wrong(S_HOLDS, v.err)
    end
    S_HELD[owner] = v or false
    v = redis.pcall('zrangebyscore', S_LEASES, '-inf', S_NOW)
    if v.err then
        return seats_wrong(S_LEASES, v.err)
    end
    S_ENDED = v
    v = redis.pcall('hget', S_REQ, owner)
    if type(v) == 'table' and v.err then
        return seats_wrong(S_REQ, v.err)
    end
    local r = false
    if v then
        local ok, d = pcall(cjson.decode, v)
        if ok and type(d) == 'table' and #d > 0 then
            r = d
        end
    end
    S_REC[owner] = r
    local acquiring = seats ~= nil
    seats = seats or r or {}
    local heads, holders = {}, {}
    for i, s in ipairs(seats) do
        heads[i] = 'h|' .. s
        holders[i] = s
    end
    if #seats == 0 then
        heads[1], holders[1] = 'h|', '' -- no seat: a read of the type only
    end
    v = redis.pcall('hmget', S_QUEUE, unpack(heads))
    if v.err then
        return seats_wrong(S_QUEUE, v.err)
    end
    for i, s in ipairs(seats) do
        S_HEADS[s] = v[i] or false
    end
    v = redis.pcall('hmget', S_SEAT, unpack(holders))
    if v.err then
        return seats_wrong(S_SEAT, v.err)
    end
    for i, s in ipairs(seats) do
        S_HOLDER[s] = v[i] or false
    end
    -- The grace hash is written only for a head of a queue examined (a
    -- grace started or dropped) or a request leaving (leave_all). With no
    -- ended lease to reclaim, the caller in no queue and no head on any
    -- of its seats (the release: on the seats it gives back), the release
    -- never touches it (it examines only those seats, and they have no
    -- head), and the acquisition touches it only when not granted, where
    -- it has written nothing yet and calls seats_grace_guard first: the
    -- HLEN is left to that call.
    local quiet = #S_ENDED == 0 and not (acquiring and r)
    for _, s in ipairs(seats) do
        quiet = quiet and not S_HEADS[s]
    end
    if quiet then
        return nil
    end
    return seats_grace_guard()
end
