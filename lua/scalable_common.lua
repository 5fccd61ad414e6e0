-- scalable_common.lua: local functions shared by the scalable fair-lock
-- scripts. It is not a script by itself: package lua prepends it to every
-- scalable_*.lua file before loading, so each script stays one atomic EVAL.
--
-- The scalable engine keeps the same queue and deadlines as the
-- Redisson-compatible engine (fair_*.lua), in a representation where every
-- step costs O(1) commands whatever the queue's length. State (all keys share
-- the lock's hash slot):
--   lock    hash owner -> hold count, PTTL = lease (the same key as Redisson's)
--   squeue  hash "fairlock_squeue:{name}", a doubly linked list:
--             h, t      the head and the tail owner
--             hd, td    the head's and the tail's deadline (absolute, client
--                       clock, milliseconds)
--             n:<o>     the owner after o ("" for the tail); present exactly
--                       when o is queued
--             p:<o>     the owner before o ("" for the head)
--             d:<o>     o's deadline minus its predecessor's (0 for the head)
--           The key is deleted when the queue empties.
-- A waiter's deadline is hd plus the deltas from the head's successor up to
-- it. Only the head's and the tail's deadlines are ever read, so "everyone
-- behind X drops by w" is one change to X's successor's delta (or to hd) and
-- to td; nobody else's field moves.

-- The Redisson-compatible engine's keys must not exist: one lock name is
-- served by one engine. Called first, before anything is written.
local function refuse_mixed(name, legacy_queue, legacy_timeouts)
    if redis.call('exists', legacy_queue, legacy_timeouts) > 0 then
        return redis.error_reply('fairlock: lock ' .. name ..
            ' is used by the Redisson-compatible fair engine (redisson_lock_queue or redisson_lock_timeout exists)')
    end
    return nil
end

-- The head and its deadline, or nil.
local function sq_head(sq)
    local v = redis.call('hmget', sq, 'h', 'hd')
    if not v[1] then
        return nil, nil
    end
    return v[1], tonumber(v[2])
end

-- Remove o from the queue; everyone behind it gets drop milliseconds
-- earlier. Returns true when o was queued, and whether it was the head.
local function sq_remove(sq, o, drop)
    local v = redis.call('hmget', sq, 'p:' .. o, 'n:' .. o, 'd:' .. o, 'td')
    if not v[2] then
        return false, false
    end
    local p, n, d, td = v[1], v[2], tonumber(v[3]), tonumber(v[4])
    if p == '' and n == '' then
        redis.call('del', sq)
        return true, true
    end
    redis.call('hdel', sq, 'p:' .. o, 'n:' .. o, 'd:' .. o)
    if p == '' then
        -- o was the head: its successor's absolute deadline becomes hd.
        local m = redis.call('hmget', sq, 'hd', 'd:' .. n)
        redis.call('hset', sq, 'h', n, 'hd', tonumber(m[1]) + tonumber(m[2]) - drop,
            'td', td - drop, 'p:' .. n, '', 'd:' .. n, 0)
        return true, true
    end
    if n == '' then
        -- o was the tail: nobody behind; the new tail is its predecessor.
        redis.call('hset', sq, 't', p, 'td', td - d, 'n:' .. p, '')
        return true, false
    end
    -- In the middle: the successor's gap to its new predecessor is the two
    -- gaps together, less the drop.
    local dn = tonumber(redis.call('hget', sq, 'd:' .. n))
    redis.call('hset', sq, 'n:' .. p, n, 'p:' .. n, p, 'd:' .. n, d + dn - drop, 'td', td - drop)
    return true, false
end

-- Append o with an absolute deadline.
local function sq_append(sq, o, deadline)
    local v = redis.call('hmget', sq, 't', 'td')
    if not v[1] then
        redis.call('hset', sq, 'h', o, 't', o, 'hd', deadline, 'td', deadline,
            'p:' .. o, '', 'n:' .. o, '', 'd:' .. o, 0)
        return
    end
    redis.call('hset', sq, 't', o, 'td', deadline, 'n:' .. v[1], o,
        'p:' .. o, v[1], 'n:' .. o, '', 'd:' .. o, deadline - tonumber(v[2]))
end

-- Same as fair_common's prune_stale_heads: drop heads whose deadline is at or
-- before now (a head always has a deadline here, so H1 cannot arise; a
-- missing one is treated as stale all the same). Nobody else moves.
local function prune_stale_heads(sq, now)
    while true do
        local head, deadline = sq_head(sq)
        if not head then
            return
        end
        if deadline and deadline > now then
            return
        end
        sq_remove(sq, head, 0)
    end
end

-- Same as fair_common's take_or_reenter. The acquirer is the head (or the
-- queue is empty); removing it with drop = wait lowers every remaining
-- deadline by wait, in O(1).
local function take_or_reenter(lock, sq, owner, lease, wait)
    if redis.call('exists', lock) == 0 then
        local head = sq_head(sq)
        if head and head ~= owner then
            return false
        end
        if head then
            sq_remove(sq, owner, wait)
        end
        redis.call('hset', lock, owner, 1)
        redis.call('pexpire', lock, lease)
        return true
    end
    if redis.call('hexists', lock, owner) == 1 then
        redis.call('hincrby', lock, owner, 1)
        redis.call('pexpire', lock, lease)
        return true
    end
    return false
end

-- Same as fair_common's clamp_head: lower the head's deadline to now + grace
-- (never raise it). Its successor's delta grows by as much, so nobody else's
-- deadline moves.
local function clamp_head(sq, now, grace)
    local v = redis.call('hmget', sq, 'h', 'hd', 't')
    local head = v[1]
    if not head then
        return nil, nil
    end
    local deadline = tonumber(v[2])
    if grace > 0 and deadline > now + grace then
        local lowered = now + grace
        if v[3] == head then
            redis.call('hset', sq, 'hd', lowered, 'td', lowered)
        else
            local n = redis.call('hget', sq, 'n:' .. head)
            redis.call('hset', sq, 'hd', lowered)
            redis.call('hincrby', sq, 'd:' .. n, deadline - lowered)
        end
        deadline = lowered
    end
    return head, deadline
end

-- Same as fair_common's hand_over: give the head its grace and wake it.
local function hand_over(sq, now, grace, channel_prefix, pubcmd, message)
    local head = clamp_head(sq, now, grace)
    if head then
        redis.call(pubcmd, channel_prefix .. ':' .. head, message)
    end
end

