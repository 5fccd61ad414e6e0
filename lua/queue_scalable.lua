-- queue_scalable.lua: the queue operations of the scalable fair engine
-- (fair.Scalable). It is not a script by itself: package lua prepends it,
-- then fair_common.lua, to every fair_*.lua script body, in place of
-- queue_redisson.lua. Same functions, same deadlines, same rules; only the
-- representation differs, so that every operation costs O(1) commands
-- whatever the queue's length.
--
-- State: one hash "fairlock_squeue:{name}" (the lock's hash slot), a doubly
-- linked list:
--   h, t      the head and the tail owner
--   hd, td    the head's and the tail's deadline (absolute, client clock,
--             Unix milliseconds)
--   n:<o>     the owner after o ("" for the tail); present exactly when o
--             is queued
--   p:<o>     the owner before o ("" for the head)
--   d:<o>     o's deadline minus its predecessor's (0 for the head)
--   s:<o>     o's join sequence: the tail's + 1 when o joined (1 when it
--             joined an empty queue); strictly increasing from head to tail.
--             A lock waiter that joined with an acquisition latch appends
--             its handoff note: "<seq>|<lease>|<slot>|<latch ms>|<latch
--             key>" (what a release needs to grant it the lock directly,
--             q_grant_note; in the same field so that a join writes no more
--             fields and q_length stays HLEN arithmetic)
--   hs, ts    the head's and the tail's join sequence
-- The join sequences serve only the waiter's position (q_ahead): s:<o> - hs
-- counts the waiters ahead of o plus the gaps left by waiters that gave up
-- from between the head and o. They are optional: a queue written without
-- them (an older version of this module) is not reset, its waiters' position
-- is unknown (-1).
-- The key is deleted when the queue empties. Waiter k's deadline is hd plus
-- the deltas from the head's successor up to k; only the head's and the
-- tail's are ever read, so "everyone behind X drops by w" is one change to
-- X's successor's delta (or to hd) and to td.
--
-- Malformed state (fields deleted or edited by hand, evicted, a key of the
-- wrong type) is repaired, never looped on: every field an operation reads
-- is checked before anything is written, and when the links do not hold
-- together the queue is reset (the hash deleted). The lock hash is not
-- touched, so exclusion holds; the waiters then join again, in the order of
-- their next attempts: order among them is lost once, liveness is not.

local sq, rqueue, rtimeouts

-- Reads repeated within one script are cached until the script writes the
-- queue: the ends (ENDS: h, t, hd, td as numbers, read and checked by
-- q_check; own: hs was written in this script from the head's own
-- sequence) and the front (FRONT_OK: FRONT_H and FRONT_S are the head and
-- the waiter behind it). Every write below clears or updates them.
local ENDS, FRONT_OK, FRONT_H, FRONT_S
-- Also cached until a write (issue 33: fewer commands per release and per
-- join): the head's node fields as q_check read them (NODE_O the head,
-- NODE_V its raw p:, n:, d:, s: values), and EMPTY, the queue known empty
-- (q_check found no key, or this script deleted it).
local NODE_O, NODE_V, EMPTY
-- HDR: the HMGET reply of the queue's ends (q_ends), read once until the
-- script writes the queue (issue 33: q_refuse and q_check share it).
local HDR

local function q_written()
    ENDS, FRONT_OK, FRONT_H, FRONT_S = nil, false, nil, nil
    NODE_O, NODE_V, EMPTY, HDR = nil, nil, false, nil
end

-- seq reads a join sequence field (nil when missing or not a number); a
-- handoff note after the sequence is skipped.
local function seq(v)
    if type(v) ~= 'string' then
        return nil
    end
    return tonumber(string.match(v, '^[^|]*'))
end

-- seq_field adds field = v to the HSET arguments set, or, v nil (a queue
-- written without sequences), deletes the field.
local function seq_field(set, field, v)
    if v then
        set[#set + 1] = field
        set[#set + 1] = v
    else
        redis.call('hdel', sq, field)
    end
end

-- q_emptied: the queue is known empty (found so, or deleted).
local function q_emptied()
    ENDS, FRONT_OK, FRONT_H, FRONT_S = nil, true, nil, nil
    NODE_O, NODE_V, EMPTY, HDR = nil, nil, true, nil
end

-- q_reset: the queue is inconsistent: start again from an empty queue.
local function q_reset()
    redis.call('del', sq)
    q_emptied()
end

-- The node fields of o: previous, next, delta, join sequence (nil when
-- missing).
local function node(o)
    local v = NODE_O == o and NODE_V or
        redis.call('hmget', sq, 'p:' .. o, 'n:' .. o, 'd:' .. o, 's:' .. o)
    return v[1] or nil, v[2] or nil, tonumber(v[3]), seq(v[4])
end

-- q_ends: the raw HMGET of the queue's ends (an error reply when the key
-- has another type), read once until a write.
local function q_ends()
    if not HDR then
        HDR = redis.pcall('hmget', sq, 'h', 't', 'hd', 'td', 'hs', 'ts')
    end
    return HDR
end

-- q_init names the keys: the Redisson-compatible engine's list and zset
-- (only ever checked, never written) and this engine's hash.
local function q_init(list, zset, hash)
    rqueue, rtimeouts, sq = list, zset, hash
end

-- q_check checks the ends of the list before a script uses the queue: the
-- head and the tail exist, have whole deadlines and consistent links. A key
-- of the wrong type or a broken end resets the queue. Returns the head and
-- the waiter behind it (either may be nil).
local function q_check()
    if EMPTY then
        return nil, nil
    end
    local v = q_ends()
    if v.err then
        q_reset()
        return nil, nil
    end
    local h, t = v[1], v[2]
    if not h and not t and not v[3] and not v[4] then
        if redis.call('exists', sq) == 1 then
            q_reset() -- node fields without a head
        else
            q_emptied()
        end
        return nil, nil
    end
    if not h or not t or not tonumber(v[3]) or not tonumber(v[4]) then
        q_reset()
        return nil, nil
    end
    local e = redis.call('hmget', sq, 'p:' .. h, 'n:' .. h, 'd:' .. h, 'p:' .. t, 'n:' .. t, 's:' .. h)
    if e[1] ~= '' or not e[2] or tonumber(e[3]) ~= 0 or not e[4] or e[5] ~= '' or (e[2] == '') ~= (h == t) then
        q_reset()
        return nil, nil
    end
    ENDS = {h = h, t = t, hd = tonumber(v[3]), td = tonumber(v[4]), hs = seq(v[5]), ts = seq(v[6])}
    FRONT_OK, FRONT_H, FRONT_S = true, h, nil
    NODE_O, NODE_V = h, {e[1], e[2], e[3], e[6]}
    if e[2] ~= '' then
        FRONT_S = e[2]
    end
    return FRONT_H, FRONT_S
end

-- q_start_keys: how many of this engine's queue keys existed when the
-- script started, when q_check found a head: its one hash.
local function q_start_keys(_)
    return 1
end

-- q_refuse: one lock name, one engine. The acquisition scripts refuse a
-- lock whose Redisson-compatible queue keys exist. Returns the error reply,
-- or nil, and (issue 33) whether the head grace key (grace_key) is known
-- absent, for begin (fair_common.lua), which then neither reads nor
-- deletes it. One EXISTS counts the Redisson keys with this engine's hash
-- and the grace key: none exists (a join of an empty queue) answers the
-- refusal, the queue check and the grace at once; only one, and the queue's
-- head is read (q_check needs it anyway): it is the hash, so no refusal and
-- no grace key. Otherwise the Redisson keys are counted alone.
local function q_refuse(name, grace_key)
    local n = redis.call('exists', rqueue, rtimeouts, sq, grace_key)
    if n == 0 then
        q_emptied()
        return nil, true
    end
    if n == 1 and q_ends()[1] then
        return nil, true
    end
    if redis.call('exists', rqueue, rtimeouts) > 0 then
        return redis.error_reply('fairlock: lock ' .. name ..
            ' is used by the Redisson-compatible fair engine (redisson_lock_queue or redisson_lock_timeout exists)')
    end
    return nil
end

-- q_front: the head and the waiter right behind it (either may be nil).
local function q_front()
    if FRONT_OK then
        return FRONT_H, FRONT_S
    end
    local head = redis.call('hget', sq, 'h')
    if not head then
        FRONT_OK, FRONT_H, FRONT_S = true, nil, nil
        return nil, nil
    end
    local _, n = node(head)
    if not n then
        q_reset()
        return nil, nil
    end
    FRONT_OK, FRONT_H, FRONT_S = true, head, nil
    if n ~= '' then
        FRONT_S = n
    end
    return FRONT_H, FRONT_S
end

-- q_other_front: the Redisson-compatible engine's head and second, when its
-- queue exists (a release wakes them). Never fails.
local function q_other_front()
    local v = redis.pcall('lrange', rqueue, 0, 1)
    if v.err then
        return nil, nil
    end
    return v[1], v[2]
end

-- q_head_deadline: the head's deadline (head: the head, from q_front).
local function q_head_deadline(_)
    if EMPTY then
        return nil
    end
    if ENDS then
        return ENDS.hd
    end
    return tonumber(redis.call('hget', sq, 'hd'))
end

-- q_queued: whether owner is queued.
local function q_queued(owner)
    if EMPTY then
        return false
    end
    if NODE_O == owner then
        return type(NODE_V[2]) == 'string'
    end
    return redis.call('hexists', sq, 'n:' .. owner) == 1
end

-- q_ahead: the waiters ahead of owner, from the join sequences: s:<owner> -
-- hs, O(1). Exact unless waiters between the head and owner gave up (each
-- such gap counts until the head passes it): an upper bound that never
-- grows while owner stays queued (hs only grows, s:<owner> never changes).
-- -1 when owner is not queued or a sequence is missing.
local function q_ahead(owner)
    if ENDS and ENDS.own and owner == ENDS.h then
        -- hs was written from the head's own sequence in this script
        -- (ENDS.own; issue 33: the note after a grant reads nothing)
        return ENDS.hs and 0 or -1
    end
    local v = redis.call('hmget', sq, 's:' .. owner, 'hs')
    local s, hs = seq(v[1]), seq(v[2])
    if not s or not hs or s < hs then
        return -1
    end
    return s - hs
end

-- q_length: how many waiters are queued, from the hash's field count, O(1):
-- six fields for the ends (h, t, hd, td, hs, ts) and four per waiter (n:,
-- p:, d:, s:); four and three in a queue written without join sequences.
local function q_length()
    local n = redis.call('hlen', sq)
    if n < 4 then
        return 0
    end
    local v = redis.call('hmget', sq, 'hs', 'ts')
    if v[1] and v[2] then
        return math.max(0, math.floor((n - 6) / 4))
    end
    return math.floor((n - 4) / 3)
end

-- q_tail: the last waiter and its deadline.
local function q_tail()
    if EMPTY then
        return nil, nil
    end
    if ENDS then
        return ENDS.t, ENDS.td
    end
    local v = redis.call('hmget', sq, 't', 'td')
    if not v[1] then
        return nil, nil
    end
    return v[1], tonumber(v[2])
end

-- q_size bounds a loop over the queue (an upper bound: three fields per
-- waiter and four for the ends).
local function q_size()
    return redis.call('hlen', sq)
end

-- Remove o from the queue; everyone behind it gets drop milliseconds
-- earlier. Every field read is checked first; broken links reset the queue.
-- Returns whether o was queued.
local function sq_remove(o, drop)
    local p, n, d = node(o)
    if not n then
        return false
    end
    local ends = ENDS and {ENDS.h, ENDS.t, ENDS.hd, ENDS.td, ENDS.hs, ENDS.ts} or
        redis.call('hmget', sq, 'h', 't', 'hd', 'td', 'hs', 'ts')
    local hd, td = tonumber(ends[3]), tonumber(ends[4])
    q_written()
    if not p or not d or not hd or not td or (p == '') ~= (ends[1] == o) or (n == '') ~= (ends[2] == o) then
        q_reset()
        return true
    end
    if p == '' and n == '' then
        redis.call('del', sq)
        q_emptied()
        return true
    end
    if p == '' then
        -- o was the head: its successor's absolute deadline becomes hd.
        local np, nn, nd, ns = node(n)
        if np ~= o or not nn or not nd then
            q_reset()
            return true
        end
        redis.call('hdel', sq, 'p:' .. o, 'n:' .. o, 'd:' .. o, 's:' .. o)
        local nhd = hd + nd - drop
        local set = {'h', n, 'hd', nhd, 'td', td - drop, 'p:' .. n, '', 'd:' .. n, 0}
        seq_field(set, 'hs', ns)
        redis.call('hset', sq, unpack(set))
        ENDS = {h = n, t = ends[2], hd = nhd, td = td - drop, hs = ns, ts = seq(ends[6]), own = true}
        FRONT_OK, FRONT_H, FRONT_S = true, n, nil
        if nn ~= '' then
            FRONT_S = nn
        end
        return true
    end
    local _, pn, _, ps = node(p)
    if pn ~= o then
        q_reset()
        return true
    end
    if n == '' then
        -- o was the tail: nobody behind; the new tail is its predecessor
        -- (and the next joiner's sequence follows it: no gap at the tail).
        redis.call('hdel', sq, 'p:' .. o, 'n:' .. o, 'd:' .. o, 's:' .. o)
        local set = {'t', p, 'td', td - d, 'n:' .. p, ''}
        seq_field(set, 'ts', ps)
        redis.call('hset', sq, unpack(set))
        return true
    end
    -- In the middle: the successor's gap to its new predecessor is the two
    -- gaps together, less the drop.
    local np, _, nd = node(n)
    if np ~= o or not nd then
        q_reset()
        return true
    end
    redis.call('hdel', sq, 'p:' .. o, 'n:' .. o, 'd:' .. o, 's:' .. o)
    redis.call('hset', sq, 'n:' .. p, n, 'p:' .. n, p, 'd:' .. n, d + nd - drop, 'td', td - drop)
    return true
end

-- q_pop_head removes the head (pruned as dead): nobody else moves.
local function q_pop_head()
    local head = q_front()
    if head then
        sq_remove(head, 0)
    end
end

-- q_take: owner (the head, or nobody is queued) takes the lock: it leaves
-- the queue and every remaining deadline drops by its slot.
local function q_take(owner, wait)
    if q_front() == owner then
        sq_remove(owner, wait)
    end
end

-- q_remove: owner gives up: the waiters behind it drop by its slot.
local function q_remove(owner, wait)
    sq_remove(owner, wait)
end

-- q_append: owner joins at the tail with an absolute deadline (tail, td:
-- the tail and its deadline, from q_tail). note: the handoff note to keep
-- after the join sequence ('|...', see s:<o>), or nil.
local function q_append(owner, deadline, tail, td, note)
    note = note or ''
    if tail and td then
        local _, tn, _, ts = node(tail)
        -- The front stays as read, with a lone head's successor filled in
        -- (issue 33: finish does not read it again after a join).
        local front_ok, fh, fs = FRONT_OK, FRONT_H, FRONT_S
        q_written()
        if tn == '' then
            local set = {'t', owner, 'td', deadline, 'n:' .. tail, owner,
                'p:' .. owner, tail, 'n:' .. owner, '', 'd:' .. owner, deadline - td}
            if ts then
                -- (a queue written without sequences: this waiter has none either)
                seq_field(set, 's:' .. owner, int_str(ts + 1) .. note)
                seq_field(set, 'ts', ts + 1)
            end
            redis.call('hset', sq, unpack(set))
            if front_ok and fh then
                FRONT_OK, FRONT_H, FRONT_S = true, fh, fs or owner
            end
            return
        end
    end
    if tail then
        q_reset()
    end
    redis.call('hset', sq, 'h', owner, 't', owner, 'hd', deadline, 'td', deadline,
        'p:' .. owner, '', 'n:' .. owner, '', 'd:' .. owner, 0, 's:' .. owner, '1' .. note, 'hs', 1, 'ts', 1)
    -- The queue is this one waiter: its ends and node are what was written.
    q_written()
    ENDS = {h = owner, t = owner, hd = deadline, td = deadline, hs = 1, ts = 1, own = true}
    FRONT_OK, FRONT_H = true, owner
    NODE_O, NODE_V = owner, {'', '', '0', '1' .. note}
end

-- Direct handoff (issue 23): q_grant_note(owner) reads back the note
-- (grant_note, latch_common.lua) owner joined with, kept after its join
-- sequence in s:<o>: lease, slot, latch lifetime and latch key, or nil when
-- owner joined without one.
local function q_grant_note(owner)
    local v = NODE_O == owner and NODE_V[4] or redis.call('hget', sq, 's:' .. owner)
    return grant_note_read(type(v) == 'string' and string.match(v, '^%d+(|.+)$'))
end

-- q_noted: every waiter of this engine is this library's and takes a note
-- (queue_redisson.lua's q_noted).
local function q_noted(_)
    return true
end
