-- queue_redisson.lua: the queue operations of the Redisson-compatible fair
-- engine (fair.Redisson), over Redisson's own keys. It is not a script by
-- itself: package lua prepends it, then fair_common.lua, to every fair_*.lua
-- script body; the scalable engine prepends queue_scalable.lua instead, which
-- defines the same functions over its own representation. So the two engines
-- run the same script bodies and the same rules; only these functions differ.
--
-- State (all keys share the lock's hash slot):
--   queue     "redisson_lock_queue:{name}", list of waiting owners, head first
--   timeouts  "redisson_lock_timeout:{name}", zset owner -> deadline
--             (absolute, client clock, Unix milliseconds)
-- Java Redisson clients read and write both keys with their own scripts, so
-- every change made here follows Redisson's rules (redisson-reference §5.1):
-- a waiter joins with the tail's deadline + its slot (or now + PTTL + slot);
-- a take lowers every remaining deadline by the taker's slot; a give-up
-- lowers the deadlines behind the leaver by its slot; a pruned head moves
-- nobody. Nothing else ever changes a deadline.
--
-- Not in Redisson (issue 33): notes "fairlock_notes:{name}", a hash owner ->
-- the handoff note ("|lease|slot|latch ms|latch key") a waiter of this
-- library's clients (q_noted) joined with, for a release to grant it the
-- lock directly (fair_common.lua, handoff). Java clients neither read nor
-- write it; their scripts may prune such a waiter without deleting its
-- entry, so the hash expires (NOTE_MARGIN past its latest waiter's
-- deadline) and an entry is used only for the head whose request is still
-- open (its acquisition latch absent).
--
-- Every loop here runs at most once per element of a list or zset, so every
-- script terminates whatever the keys hold.

local queue, timeouts, squeue, notes
local NOTE_MARGIN = 60000

-- The front of the queue is cached within one script (FRONT_OK: FRONT_H,
-- FRONT_S are the head and the waiter behind it; FRONT_T_OK: FRONT_T is the
-- third, nil when the list is shorter). The writers below keep it when they
-- know what they changed (a pop of the head moves the front up, an append
-- fills the first place still empty), else clear it (issue 33: a grant's
-- release and a join of a busy queue read the front once, not twice).
local FRONT_OK, FRONT_H, FRONT_S, FRONT_T_OK, FRONT_T

-- q_init names the keys: this engine's list and zset, and the scalable
-- engine's queue hash (only ever checked, never written).
local function q_init(list, zset, sq)
    queue, timeouts, squeue = list, zset, sq
    notes = 'fairlock_notes' .. string.sub(list, #'redisson_lock_queue' + 1)
end

-- q_noted: whether owner's client takes a note ("s:<sleep ms>:<ahead>",
-- wake_front in fair_common.lua) for a wake-up while the lock is held, in
-- place of Redisson's "0", and a grant (handoff). Java clients decode every
-- message on a waiter's channel as a number, so only this library's clients
-- may get one: their client ids are version-8 UUIDs (RFC 9562),
-- "xxxxxxxx-xxxx-8xxx-...", where Redisson's are always version 4
-- (UUID.randomUUID) (issue 33).
local function q_noted(owner)
    return string.find(owner, '^%x%x%x%x%x%x%x%x%-%x%x%x%x%-8%x%x%x%-') ~= nil
end

-- q_drop_note: owner left the queue; its handoff note goes.
local function q_drop_note(owner)
    if q_noted(owner) then
        redis.call('hdel', notes, owner)
    end
end


-- q_refuse: one lock name, one engine. The acquisition scripts refuse a
-- lock whose queue the scalable engine keeps, before anything is written.
-- Returns the error reply, or nil and whether the grace key (grace_key) is
-- known absent: one EXISTS counts both keys, and only a count of one needs
-- a second to tell which (issue 33: a join of a held lock then deletes no
-- grace key, begin(no_grace)).
local function q_refuse(name, grace_key)
    local n = redis.call('exists', squeue, grace_key)
    if n == 2 or n == 1 and redis.call('exists', squeue) == 1 then
        return redis.error_reply('fairlock: lock ' .. name ..
            ' is used by the scalable fair engine (fairlock_squeue exists)')
    end
    return nil, n == 0
end

-- q_front: the head and the waiter right behind it (either may be nil). A
-- queue key of another type (edited by hand) reads as empty here, so that a
-- holder can still release; the scripts that write the queue then fail with
-- Redis's WRONGTYPE error.
local function q_front()
    if FRONT_OK then
        return FRONT_H, FRONT_S
    end
    local v = redis.pcall('lrange', queue, 0, 2)
    if v.err then
        return nil, nil
    end
    FRONT_OK, FRONT_H, FRONT_S, FRONT_T_OK, FRONT_T = true, v[1], v[2], true, v[3]
    return v[1], v[2]
end

-- front_whole: the cached front holds the whole list.
local function front_whole()
    return FRONT_OK and (not FRONT_S or FRONT_T_OK and not FRONT_T)
end

-- front_popped: the script popped the head (LPOP) that q_front read; the
-- front moves up (the new third is known only when the list was).
local function front_popped(head)
    if FRONT_OK and FRONT_H == head and FRONT_T_OK then
        FRONT_H, FRONT_S, FRONT_T_OK, FRONT_T = FRONT_S, FRONT_T, FRONT_T == nil, nil
    else
        FRONT_OK = false
    end
end

-- q_check: nothing to repair here (a waiter without a deadline, H1, is
-- pruned when it reaches the head; every loop is bounded by a key's
-- length). Returns the head and the waiter behind it.
local function q_check()
    return q_front()
end

-- q_other_front: the scalable engine's head and second, when its queue
-- exists (a release wakes them: one lock hash, two queues). Never fails.
local function q_other_front()
    local v = redis.pcall('hget', squeue, 'h')
    if type(v) ~= 'string' then
        return nil, nil
    end
    local n = redis.pcall('hget', squeue, 'n:' .. v)
    if type(n) ~= 'string' or n == '' then
        n = nil
    end
    return v, n
end

-- HD_O, HD_V: the deadline of HD_O as read, until the script writes the
-- queue (every writer below clears HD_O).
local HD_O, HD_V

-- q_head_deadline: the deadline of head (the head, from q_front), nil for
-- a head without one (H1).
local function q_head_deadline(head)
    if HD_O ~= head then
        HD_O, HD_V = head, tonumber(redis.call('zscore', timeouts, head))
    end
    return HD_V
end

-- q_start_keys(head): how many of this engine's queue keys existed when the
-- script started, when head (q_check's, before any write) tells: the list
-- holds it, and the zset exists when head has a deadline (2); nil when
-- that is not known (no deadline, or the zset is not a zset).
local function q_start_keys(head)
    local v = redis.pcall('zscore', timeouts, head)
    if type(v) == 'table' then
        return nil
    end
    HD_O, HD_V = head, tonumber(v)
    if HD_V then
        return 2
    end
    return nil
end

-- q_queued: whether owner has a deadline, i.e. is queued (Redisson's test).
local function q_queued(owner)
    return redis.call('zscore', timeouts, owner) ~= false
end

-- q_tail: the last waiter and its deadline (nil when it has none).
local function q_tail()
    if front_whole() then
        -- the front as read holds the whole list (at most two waiters)
        if not FRONT_H then
            return nil, nil
        end
        if not FRONT_S then
            return FRONT_H, q_head_deadline(FRONT_H)
        end
        return FRONT_S, tonumber(redis.call('zscore', timeouts, FRONT_S))
    end
    local tail = redis.call('lindex', queue, -1)
    if not tail then
        return nil, nil
    end
    return tail, tonumber(redis.call('zscore', timeouts, tail))
end

-- q_size bounds a loop over the queue.
local function q_size()
    return redis.call('llen', queue)
end

-- q_ahead: how many waiters are ahead of owner (0: the head), one LPOS
-- (O(k) for k ahead; Redis 6.0.6 or later); -1 when owner is not queued or
-- LPOS is not available. Read only; Redisson's keys are never written for it.
local function q_ahead(owner)
    -- the first three places as read need no LPOS (issue 33: the notes
    -- after a handoff)
    if FRONT_OK then
        if owner == FRONT_H then
            return 0
        elseif owner == FRONT_S then
            return 1
        elseif FRONT_T_OK and owner == FRONT_T then
            return 2
        end
    end
    local v = redis.pcall('lpos', queue, owner)
    if type(v) ~= 'number' then
        return -1
    end
    return v
end

-- q_pop_head removes the head (pruned as dead): nobody else moves.
local function q_pop_head()
    HD_O = nil
    local head = redis.call('lpop', queue)
    front_popped(head)
    if head then
        redis.call('zrem', timeouts, head)
        q_drop_note(head)
    end
end

-- q_shift lowers the deadlines of the given waiters (all of them when only
-- is nil) by wait: what Redisson does with one ZINCRBY per waiter, done
-- with one ZRANGE and one ZADD per 500 waiters, which leaves the same
-- scores (an integral score is written back exactly; any other with 17
-- significant digits, enough to round-trip a double) at a fraction of the
-- Redis time: the per-command overhead dominates these calls.
local function q_shift(wait, only)
    local flat = redis.call('zrange', timeouts, 0, -1, 'withscores')
    local args, n = {}, 0
    for i = 1, #flat, 2 do
        local waiter = flat[i]
        if only == nil or only[waiter] then
            if only then
                only[waiter] = false -- seen
            end
            local v = tonumber(flat[i + 1]) - wait
            if v == math.floor(v) and math.abs(v) < 2^53 then
                args[n + 1] = string.format('%d', v)
            else
                args[n + 1] = string.format('%.17g', v)
            end
            args[n + 2] = waiter
            n = n + 2
            if n == 1000 then
                redis.call('zadd', timeouts, unpack(args, 1, n))
                n = 0
            end
        end
    end
    if n > 0 then
        redis.call('zadd', timeouts, unpack(args, 1, n))
    end
    -- ZINCRBY gives a waiter without a deadline (H1) the score -wait.
    for waiter, unseen in pairs(only or {}) do
        if unseen then
            redis.call('zadd', timeouts, -wait, waiter)
        end
    end
end

-- q_take: owner (the head, or nobody is queued) takes the lock: it leaves
-- the queue and every remaining deadline drops by its slot (Redisson's take).
local function q_take(owner, wait)
    HD_O = nil
    redis.call('zrem', timeouts, owner)
    -- owner is the head as read, or nobody is queued (the front stays empty)
    if not (FRONT_OK and not FRONT_H) then
        front_popped(owner)
    end
    redis.call('lpop', queue)
    q_drop_note(owner)
    q_shift(wait, nil)
end

-- q_remove: owner gives up (Redisson's acquireFailed): the waiters behind
-- it drop by its slot; it leaves both keys. Nothing happens if it is not
-- queued.
local function q_remove(owner, wait)
    FRONT_OK = false
    HD_O = nil
    local waiters = redis.pcall('lrange', queue, 0, -1)
    if waiters.err then
        return -- not a list: nobody is queued in it
    end
    local behind, only = false, {}
    for _, waiter in ipairs(waiters) do
        if behind then
            only[waiter] = true
        elseif waiter == owner then
            behind = true
        end
    end
    if behind then
        q_shift(wait, only)
    end
    redis.call('zrem', timeouts, owner)
    redis.call('lrem', queue, 0, owner)
    q_drop_note(owner)
end

-- q_append: owner joins at the tail with an absolute deadline (tail, its
-- deadline: from q_tail, unused here). note: its handoff note (grant_note) or
-- nil; rel: its deadline less the caller's now.
local function q_append(owner, deadline, _, _, note, rel)
    HD_O = nil
    if redis.call('zadd', timeouts, deadline, owner) == 1 then
        redis.call('rpush', queue, owner)
        -- the joiner fills the first of the front's places still empty
        -- (none when three or more waiters are ahead: the front stays)
        if FRONT_OK and not FRONT_H then
            FRONT_H, FRONT_T_OK, FRONT_T = owner, true, nil
        elseif FRONT_OK and not FRONT_S then
            FRONT_S, FRONT_T_OK, FRONT_T = owner, true, nil
        elseif FRONT_OK and FRONT_T_OK and not FRONT_T then
            FRONT_T = owner
        end
    end
    if not q_noted(owner) then
        return
    end
    if not note then
        redis.call('hdel', notes, owner)
        return
    end
    redis.call('hset', notes, owner, note)
    local keep = math.max(rel, 0) + NOTE_MARGIN
    local pttl = redis.call('pttl', notes)
    if pttl < keep then
        redis.call('pexpire', notes, keep)
    end
end

-- Direct handoff (issue 23; on this engine only to this library's waiters,
-- issue 33: a Java waiter is woken and takes the lock itself, as in
-- Redisson): q_grant_note(owner) reads back the note (grant_note,
-- latch_common.lua) owner joined with: lease, slot, latch lifetime and latch
-- key, or nil when owner joined without one or is a Java client's.
local function q_grant_note(owner)
    if not q_noted(owner) then
        return nil
    end
    return grant_note_read(redis.call('hget', notes, owner))
end
