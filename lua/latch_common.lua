-- latch_common.lua: the acquisition latch and the fair-head wake-up of the
-- reentrant unlocks (not in Redisson), prepended by package lua to every
-- script, so each stays one atomic EVAL.
--
-- One acquisition call (Lock, TryLock, ...) sends its script with one request
-- id, reused when the call is retried (by go-redis after a timeout, or by the
-- library), and copies of one request may reach Redis late: a server that was
-- stopped runs every buffered copy when it resumes. The latch
-- "fairlock_acquire_latch:{name}:<request-id>" makes the copies count once:
--   absent   no copy has taken the lock yet: run normally;
--   'held'   a copy took the lock: a later copy replies "OK" again without
--            adding a second hold while the owner still holds the lock, and
--            once it does not (released, or lost), an error: the request was
--            granted and its hold is over, so a late copy never takes the
--            lock again;
--   'held:<token>'  the same, for a script that returns a fencing token
--            (the fenced lock, the fair lock): a later copy replies
--            {-1, <token>}, the token the first copy got, never a new one;
--   'granted:<token>'  a release granted the lock to the request's owner
--            directly (the scalable fair engine's handoff, fair_common.lua):
--            the first copy that comes while the owner holds the lock claims
--            the grant (sets the lock's TTL to the copy's lease) and the
--            latch becomes 'held:<token>'; it replies as 'held:<token>'
--            does. Never a second hold.
--   'void'   the caller gave up on the request (abandon.lua; 'void:held'
--            when a copy had taken the lock, which the caller gives back):
--            a late copy does nothing at all (it neither takes the lock nor
--            queues).
-- A latch lives ttl milliseconds from the copy that wrote it; ttl 0 (an
-- acquisition sent with no request id) skips the latch.

-- The token of a latch 'held:<token>', else nil.
local function latch_token(state)
    if type(state) == 'string' and string.sub(state, 1, 5) == 'held:' then
        return tonumber(string.sub(state, 6))
    end
    if type(state) == 'string' and string.sub(state, 1, 8) == 'granted:' then
        return tonumber(string.sub(state, 9))
    end
    return nil
end

-- Before anything else: returns the reply to give at once, or nil to run.
-- lease (optional): the copy's lease, which claims a 'granted:' latch.
local function latch_check(latch, ttl, lock, owner, lease)
    if tonumber(ttl) <= 0 then
        return nil
    end
    local state = redis.call('get', latch)
    if state == 'void' or state == 'void:held' then
        return redis.error_reply('fairlock: acquisition request abandoned')
    end
    if state == 'held' or latch_token(state) then
        if redis.call('hexists', lock, owner) == 1 then
            if state == 'held' then
                return 'OK'
            end
            if lease and string.sub(state, 1, 8) == 'granted:' then
                redis.call('pexpire', lock, lease)
                redis.call('set', latch, 'held:' .. latch_token(state), 'px', ttl)
            end
            return {-1, latch_token(state)}
        end
        return redis.error_reply('fairlock: acquisition request already granted and its hold is over')
    end
    return nil
end

-- After the owner took or re-entered the lock; token: the fencing token the
-- acquisition returns, kept for a later copy (nil: none, plain 'held').
local function latch_grant(latch, ttl, token)
    if tonumber(ttl) > 0 then
        if token then
            redis.call('set', latch, 'held:' .. token, 'px', ttl)
        else
            redis.call('set', latch, 'held', 'px', ttl)
        end
    end
end


-- Not in Redisson, used by the reentrant unlock scripts: wake the head of a
-- fair queue kept on the same lock name (by either fair engine) on its own
-- channel, since fair waiters do not listen on the plain lock channel. A
-- queue key of an unexpected type is ignored. With neither queue key (the
-- common case: no fair handle waits on the name), one EXISTS instead of two
-- reads (issue 23).
local function wake_fair_head(queue, squeue, channel, pubcmd, message)
    if redis.call('exists', queue, squeue) == 0 then
        return
    end
    local head = redis.pcall('lindex', queue, 0)
    if type(head) ~= 'string' then
        head = redis.pcall('hget', squeue, 'h')
    end
    if type(head) == 'string' then
        redis.call(pubcmd, channel .. ':' .. head, message)
    end
end
