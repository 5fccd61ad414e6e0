-- fair_common.lua: local functions shared by the fair-lock scripts. It is not
-- a script by itself: package lua prepends it to every fair_*.lua file before
-- loading, so each script stays one atomic EVAL.
--
-- State (all keys share the lock's hash slot):
--   lock      hash owner -> hold count, PTTL = lease
--   queue     list of waiting owners, FIFO, head first
--   timeouts  zset owner -> deadline (absolute, client clock, milliseconds)

-- Not in Redisson: a lock whose queue is kept by this module's scalable
-- engine (fairlock_squeue:{name}) is refused before anything is written,
-- so the two engines are never mixed on one name. Returns the error reply
-- to return, or nil.
local function refuse_scalable(squeue, name)
    if redis.call('exists', squeue) == 1 then
        return redis.error_reply('fairlock: lock ' .. name ..
            ' is used by the scalable fair engine (fairlock_squeue exists)')
    end
    return nil
end

-- Drop queue heads that are dead: a head whose deadline is at or before now,
-- or a head with no deadline at all. Redisson stops at a head without a
-- deadline, which then blocks the lock for ever (hazard H1); here it is stale.
-- Nobody else's deadline moves: a dead waiter's slot was spent in real time.
local function prune_stale_heads(queue, timeouts, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then
            return
        end
        local deadline = redis.call('zscore', timeouts, head)
        if deadline and tonumber(deadline) > now then
            return
        end
        redis.call('zrem', timeouts, head)
        redis.call('lpop', queue)
    end
end

-- Take the lock when it is free and nobody is queued ahead of owner, or
-- re-enter it when owner holds it. On a fresh take the owner leaves the queue
-- and every remaining deadline drops by the acquirer's slot (wait), because
-- the slot reserved for the acquirer's turn is no longer needed.
-- Returns true when owner holds the lock afterwards.
local function take_or_reenter(lock, queue, timeouts, owner, lease, wait)
    if redis.call('exists', lock) == 0 then
        local head = redis.call('lindex', queue, 0)
        if head and head ~= owner then
            return false
        end
        redis.call('lpop', queue)
        redis.call('zrem', timeouts, owner)
        for _, waiter in ipairs(redis.call('zrange', timeouts, 0, -1)) do
            redis.call('zincrby', timeouts, -wait, waiter)
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

-- Head grace (not in Redisson): while the lock is free, the head must take it
-- within grace milliseconds or be pruned as dead. Its deadline is lowered to
-- now + grace (never raised). grace <= 0 turns this off.
-- Returns the head (or nil) and its deadline after the clamp.
local function clamp_head(queue, timeouts, now, grace)
    local head = redis.call('lindex', queue, 0)
    if not head then
        return nil, nil
    end
    local deadline = tonumber(redis.call('zscore', timeouts, head))
    if grace > 0 and deadline > now + grace then
        deadline = now + grace
        redis.call('zadd', timeouts, deadline, head)
    end
    return head, deadline
end

-- The lock has just become free: give the head its grace and wake it (and
-- only it) on its own channel "<channel prefix>:<owner>".
local function hand_over(queue, timeouts, now, grace, channel_prefix, pubcmd, message)
    local head = clamp_head(queue, timeouts, now, grace)
    if head then
        redis.call(pubcmd, channel_prefix .. ':' .. head, message)
    end
end

