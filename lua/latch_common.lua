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
--            the grant (sets the lock's TTL to the copy's lease, unless
--            that would shorten it) and the
--            latch becomes 'held:<token>'; it replies as 'held:<token>'
--            does. Never a second hold.
--   'void'   the caller gave up on the request (abandon.lua; 'void:held'
--            when a copy had taken the lock, which the caller gives back):
--            a late copy does nothing at all (it neither takes the lock nor
--            queues).
-- A latch lives ttl milliseconds from the copy that wrote it; ttl 0 (an
-- acquisition sent with no request id) skips the latch.

-- Numbers become strings with int_str, never with Lua's own conversion:
-- Lua 5.1's .. and tostring write a number with 14 significant digits
-- (%.14g), so on Redis 123456789012347 .. '' is '1.2345678901235e+14'.
-- string.format('%d') writes an integer exactly (every integer a Lua
-- number holds exactly: up to 2^53). A string is returned as it is.
-- (A number passed to redis.call is written with 17 digits: exact.)
local function int_str(n)
    if type(n) == 'number' then
        return string.format('%d', n)
    end
    return n
end

-- A direct handoff's note (fair_common.lua, handoff): what a release must
-- know about a waiter that joined with an acquisition request,
-- "|<lease>|<slot>|<latch ms>|<latch key>", kept by each queue (q_append)
-- and read back for its head (q_grant_note). grant_note makes one (nil: no
-- latch, so no grant); grant_note_read reads one (v: the note, or anything
-- else for none): lease, slot, latch lifetime (numbers) and latch key, or nil.
local function grant_note(lease, slot, latch_ms, latch)
    if tonumber(latch_ms) > 0 then
        return '|' .. int_str(lease) .. '|' .. int_str(slot) .. '|' .. int_str(latch_ms) .. '|' .. latch
    end
    return nil
end

local function grant_note_read(v)
    if type(v) ~= 'string' then
        return nil
    end
    local lease, slot, latch_ms, latch = string.match(v, '^|(%d+)|(%d+)|(%d+)|(.+)$')
    if not lease then
        return nil
    end
    return tonumber(lease), tonumber(slot), tonumber(latch_ms), latch
end

-- Fencing tokens are exact up to 2^53 = 9007199254740992 (issue 30): a
-- Lua number is a double, so an INCR reply past 2^53 comes back rounded
-- (2^53 + 1 reads as 2^53, a token already given out). TOKEN_END is that
-- bound as the token key holds it. token_bound(v), for the token key's
-- value v (a string, or nil/false when absent): 'end' when v is 2^53 (read
-- exactly, but its INCR would not be), 'over' when its magnitude is larger
-- (not even read exactly), nil otherwise (INCR stays exact; a value that
-- is not an integer is left to the callers' own checks).
local TOKEN_END = '9007199254740992'

local function token_bound(v)
    if type(v) ~= 'string' then
        return nil
    end
    local sign, digits = string.match(v, '^(-?)(%d+)$')
    if not digits or #digits < 16 or (#digits == 16 and digits < TOKEN_END) then
        return nil
    end
    if digits == TOKEN_END then
        if sign == '' then
            return 'end'
        end
        return nil
    end
    return 'over'
end

local function token_refusal(key, v)
    return redis.error_reply('fairlock: fencing token key ' .. key .. ' holds ' .. v ..
        ': tokens are exact up to 2^53 (' .. TOKEN_END .. '), a new token would pass it')
end

-- token_incr INCRs the token key and returns the new token, or nil with
-- the key as it was (INCRed back) when the new token is past 2^53 (only
-- then is the key read: one command in the common case). protected: an
-- INCR error returns nil (an error reply, as it is, second) instead of
-- raising.
local function token_incr(key, protected)
    local token
    if protected then
        token = redis.pcall('incr', key)
        if type(token) ~= 'number' then
            return nil, token
        end
    else
        token = redis.call('incr', key)
    end
    if math.abs(token) >= 2^53 then
        if token_bound(redis.call('get', key)) == 'over' then -- ('end': exactly 2^53)
            redis.call('decr', key)
            return nil, token_refusal(key, redis.call('get', key))
        end
    end
    return token
end

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
                -- The claim never shortens the lock's TTL: a re-entry since
                -- the grant may have set a longer lease (no expiry stays).
                local pttl = redis.call('pttl', lock)
                if pttl >= 0 and pttl < tonumber(lease) then
                    redis.call('pexpire', lock, lease)
                end
                redis.call('set', latch, 'held:' .. string.sub(state, 9), 'px', ttl)
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
            redis.call('set', latch, 'held:' .. int_str(token), 'px', ttl)
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
