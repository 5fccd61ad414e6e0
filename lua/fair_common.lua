-- fair_common.lua: the rules of the fair lock, shared by both engines, and
-- of the fair semaphore. It is not a script by itself: package wire
-- prepends an engine's queue operations (queue_redisson.lua or
-- queue_scalable.lua: q_init, q_front, q_take, ...), then a resource
-- (res_lock.lua for the fair lock, res_sem.lua for the fair semaphore:
-- res_free, res_take, ...; see res_lock.lua for the interface) and then
-- this file to every script body, so each script stays one atomic EVAL and
-- every rule is written once. Below, "the lock is free" means what the
-- resource's res_free says: for the semaphore, that the head could be
-- granted now (enough permits are free for what it asks).
--
-- Keys besides the engine's queue (all in the lock's hash slot):
--   lock     hash owner -> hold count, PTTL = lease (Redisson's)
--   channel  "redisson_lock__channel:{name}": the reentrant lock's channel;
--            a fair waiter listens on "<channel>:<owner>"
--   grace    "fairlock_grace:{name}" (not in Redisson): the head grace, see
--            below. Redisson's scripts never read it.
--
-- The head grace. While the lock is free, the head of the queue must take
-- it within the grace or be pruned as dead, so a dead head stalls its
-- followers for about a grace, not for its whole wait slot (5 minutes by
-- default). The grace lives in its own key, never in Redisson's deadlines
-- (Java clients compute new waiters' deadlines from those): the key holds
-- the head's owner id, and its PTTL, less GRACE_MARGIN, is the grace left.
-- So the grace runs on the Redis server's clock, whatever the clients'
-- clocks say. The key outlives the grace by GRACE_MARGIN so that whoever
-- calls next sees that it ran out; with nobody calling it disappears by
-- itself. It is only valid while the lock is free and its owner is the
-- head: any script that finds otherwise deletes it.
--
-- Two graces before a prune (issue 19). A grace can run out while the head
-- could not act: the server refused writes (CLIENT PAUSE WRITE) or was
-- stopped, or the head's link to Redis stalled, and the head's attempt,
-- held back, would then land after a follower's that pruned it. So a grace
-- that ran out does not prune by itself: whoever next finds it run out (the
-- lock still free, the same head) starts the head's second grace, the key
-- holding '+' .. owner, and wakes the head. The second grace thus starts at
-- a moment the server demonstrably runs scripts and publishes the head's
-- wake-up; only when it too runs out is the head pruned. An owner id is
-- '<uuid>:<thread>' and never starts with '+'.
--
-- Rules every script applies (see docs/design.md, "Fair lock"):
--   - never prune the caller: a caller is alive by definition;
--   - prune dead heads: no deadline (H1), a deadline at or before now (only
--     when the caller's grace is off), or a second head grace that ran out
--     while the lock is free (any grace that ran out when the caller's grace
--     is off);
--   - whoever finds the lock free with a head that has no grace starts it,
--     and whoever finds the head's first grace run out starts its second
--     (if its own grace setting is on);
--   - wake-ups: a waiter that moves into the first or second place of the
--     queue is woken, and the first two are woken when the lock becomes
--     free, when its lease is cut short and when the head's grace starts;
--     at most once each, and never the caller of fair_try_lock_wait (its
--     reply tells it how long to sleep).

local GRACE_MARGIN = 60000

local CHANNEL, GRACE, PUBCMD, MESSAGE, CROSS
local QUEUE, TIMEOUTS, SQUEUE -- both engines' queue keys (nil for the semaphore)

-- fair_init names the keys and the publish command of this call. cross:
-- this script releases or leaves (unlock, forceUnlock, acquireFailed), and
-- so wakes the other engine's queue when this engine has none (one lock
-- hash, two possible queues; the acquisition scripts refuse a lock whose
-- queue the other engine keeps, so for them only this engine's counts).
local function fair_init(lock, queue, timeouts, squeue, channel, grace_key, pubcmd, message, cross)
    CHANNEL, GRACE, PUBCMD, MESSAGE, CROSS = channel, grace_key, pubcmd, message, cross
    QUEUE, TIMEOUTS, SQUEUE = queue, timeouts, squeue
    res_init(lock)
    q_init(queue, timeouts, squeue)
end

-- Reads repeated within one script are cached: the grace key
-- (GRACE_OWNER, GRACE_LEFT, GRACE_SECOND, valid when GRACE_READ; the
-- resource caches its own); every write to the grace key in these scripts
-- sets or clears them. Time does not move within a script, so a cached
-- PTTL stays right.
local GRACE_READ, GRACE_OWNER, GRACE_LEFT, GRACE_SECOND

-- The other engine's head and second (q_other_front), read once per
-- script: no script of one engine writes the other's queue.
local OTHER_READ, OTHER_H, OTHER_S

local function other_front()
    if not OTHER_READ then
        OTHER_READ = true
        OTHER_H, OTHER_S = q_other_front()
    end
    return OTHER_H, OTHER_S
end

-- The head and the waiter behind it, the waiters a script may wake: this
-- engine's, or in a release when this engine has no queue, the other's.
local function front()
    local head, second = q_front()
    if not head and CROSS then
        local h, s = other_front()
        return h, s, true
    end
    return head, second, false
end

-- begin, after a script's refusal and latch checks: the queue is checked
-- (and repaired when malformed). Returns this engine's head, and the front
-- as the script found it (head0, second0: see front).
-- A release (CROSS) that finds this engine's queue empty then looks at the
-- other engine's, and finish deletes the grace key. When none of the queue
-- keys of either engine nor the grace key exists, one EXISTS says so: the
-- other front is empty and the grace key known absent, so finish has
-- nothing to read or delete (issue 23: one command instead of two or three
-- in a release with nobody queued; a release with a queue pays nothing).
-- no_grace: the acquisition's refusal check found the grace key absent
-- (q_refuse, scalable engine; issue 33): finish neither reads nor deletes
-- it.
local function begin(no_grace)
    if no_grace then
        GRACE_READ, GRACE_OWNER, GRACE_LEFT, GRACE_SECOND = true, nil, nil, nil
    end
    local head, second = q_check()
    if not head and CROSS then
        if not GRACE_READ and (FAST_QUEUED or redis.call('exists', QUEUE, TIMEOUTS, SQUEUE, GRACE)) == 0 then
            OTHER_READ, OTHER_H, OTHER_S = true, nil, nil
            GRACE_READ, GRACE_OWNER, GRACE_LEFT, GRACE_SECOND = true, nil, nil, nil
            return nil, nil, nil
        end
        local h, s = other_front()
        return nil, h, s
    end
    if head and FAST_QUEUED and FAST_QUEUED == q_start_keys(head) then
        -- The release's EXISTS counted only this engine's queue keys (the
        -- queue has a head): neither the other engine's queue nor the
        -- grace key exists (issue 33: no LRANGE or HGET of the other
        -- queue, no DEL of the grace key, no EXISTS of the lock in prune).
        OTHER_READ, OTHER_H, OTHER_S = true, nil, nil
        GRACE_READ, GRACE_OWNER, GRACE_LEFT, GRACE_SECOND = true, nil, nil, nil
    end
    return head, head, second
end

-- The grace key: its owner, the milliseconds of grace left (0 or less:
-- ran out) and whether it is the owner's second grace, or nil. A key that
-- is not ours (wrong type, no expiry) is deleted.
local function grace_read()
    if GRACE_READ then
        return GRACE_OWNER, GRACE_LEFT, GRACE_SECOND
    end
    GRACE_READ, GRACE_OWNER, GRACE_LEFT, GRACE_SECOND = true, nil, nil, nil
    local owner = redis.pcall('get', GRACE)
    if type(owner) ~= 'string' then
        if type(owner) == 'table' then
            redis.call('del', GRACE)
        end
        return nil, nil, nil
    end
    local pttl = redis.call('pttl', GRACE)
    if pttl < 0 then
        redis.call('del', GRACE)
        return nil, nil, nil
    end
    GRACE_SECOND = string.sub(owner, 1, 1) == '+'
    if GRACE_SECOND then
        owner = string.sub(owner, 2)
    end
    GRACE_OWNER, GRACE_LEFT = owner, pttl - GRACE_MARGIN
    return GRACE_OWNER, GRACE_LEFT, GRACE_SECOND
end

-- grace_start gives head a grace (its second when second is true).
local function grace_start(head, grace, second)
    local value = head
    if second then
        value = '+' .. head
    end
    redis.call('set', GRACE, value, 'px', grace + GRACE_MARGIN)
    GRACE_READ, GRACE_OWNER, GRACE_LEFT, GRACE_SECOND = true, head, grace, second
end

-- grace_clear deletes the grace key (a DEL of a key known to be absent is
-- skipped).
local function grace_clear()
    if GRACE_READ and not GRACE_OWNER then
        return
    end
    redis.call('del', GRACE)
    GRACE_READ, GRACE_OWNER, GRACE_LEFT, GRACE_SECOND = true, nil, nil, nil
end

-- Drop dead heads, never the caller: a head without a deadline (Redisson
-- stops there and blocks the lock for ever: hazard H1), a head whose
-- deadline is at or before now (Redisson's rule, only when the caller's
-- grace is off), or a head whose second grace ran out while the lock is
-- free (a first grace that ran out is renewed by finish instead; a caller
-- with its grace off renews nothing and prunes it, Redisson's way), or a
-- head the resource can never grant (res_doomed: a semaphore head asking
-- for more permits than the pool has: it is woken, and its own next call is
-- refused). Nobody
-- else's deadline moves: a dead waiter's time was spent in real time. At
-- most one pass per queued waiter. head: the head (q_front); returns the
-- head afterwards.
local function prune(caller, now, head, grace)
    local limit
    while head and head ~= caller do
        -- "free" is per head (a semaphore's head may fit where the one
        -- before it did not); the lock's answer is the same for every head.
        local graced, left, second
        -- (with the grace key known absent, whether the lock is free
        -- changes nothing here)
        if not (GRACE_READ and not GRACE_OWNER) and res_free(head) then
            graced, left, second = grace_read()
        end
        local deadline = q_head_deadline(head)
        local doomed = res_doomed(head)
        if doomed then
            deadline = nil -- never grantable: dead, as a head without a deadline
        end
        -- With the grace on (grace > 0), the deadline alone never prunes:
        -- it is Redisson's estimate (the lease at join time plus slots),
        -- which a holder renewed by its watchdog outlasts, and a live
        -- waiter would lose its place before its own slot ran out. A dead
        -- head is pruned by its second grace once the lock is free.
        if deadline and (grace > 0 or deadline > now) and not (graced == head and left <= 0 and (second or grace <= 0)) then
            break
        end
        limit = (limit or q_size()) - 1
        if limit < 0 then
            break
        end
        q_pop_head()
        res_popped(head)
        if doomed then
            -- A live waiter can be doomed (a semaphore's pool shrunk below
            -- its ask): woken, its next attempt is refused at once instead
            -- of after its sleep (issue 30 item 8).
            redis.call(PUBCMD, CHANNEL .. ':' .. head, MESSAGE)
        end
        head = q_front()
    end
    return head
end

-- Take the lock when it is free (for owner) and nobody is queued ahead of
-- owner, or re-enter it when owner holds it (res_reenter). A fresh take
-- removes owner from the queue and lowers every remaining deadline by its
-- slot (Redisson's rule). head: the head (q_front). Returns whether owner
-- holds the lock now, and whether a re-entry cut the lease short (the
-- waiters were told the old one), and whether it was a fresh take (not a
-- re-entry).
local function take_or_reenter(owner, lease, wait, head)
    if res_free(owner) then
        if head and head ~= owner then
            return false, false
        end
        q_take(owner, wait)
        res_take(owner, lease)
        return true, false, true
    end
    local held, cut = res_reenter(owner, lease)
    return held, cut, false
end

-- Join at the tail (Redisson's rule): the deadline is the tail's plus the
-- slot, or now + PTTL + slot when nobody with a deadline is ahead.
-- note: the queue's handoff note for owner (grant_note, latch_common.lua), or nil.
local function join(owner, wait, now, note)
    local ttl = res_pttl()
    local tail, deadline = q_tail()
    if tail and tail ~= owner and deadline then
        ttl = deadline - now
    end
    q_append(owner, ttl + wait + now, tail, deadline, note, ttl + wait)
end

local function wake(owner)
    redis.call(PUBCMD, CHANNEL .. ':' .. owner, MESSAGE)
end

-- sleep_held is a queued waiter's sleep while the lock is held (pttl:
-- res_blocked's answer; second: the waiter is right behind the head): the
-- lock's PTTL (-1: no expiry), for the second at most the grace, so that it
-- notices a dead head soon after a release even if a wake-up is lost.
local function sleep_held(pttl, grace, second)
    if grace > 0 and second and (pttl < 0 or pttl > grace) then
        return grace
    end
    return pttl
end

-- note sends owner the reply its attempt would get: how long to sleep and
-- where it stands (wake_front).
local function note(owner, sleep)
    redis.call(PUBCMD, CHANNEL .. ':' .. owner, 's:' .. int_str(sleep) .. ':' .. int_str(q_ahead(owner)))
end

-- wake_front wakes owner, the head or (second) the waiter behind it, in
-- finish. On the scalable engine's lock, and on the Redisson engine's for a
-- waiter of this library's clients (RES_NOTES, q_noted; not for the other
-- engine's waiters a release wakes, other), a waiter woken while the
-- lock is held would only run an attempt that changes nothing and replies
-- how long to sleep (reply: the lock's PTTL, for the second at most the
-- grace) and where it stands (q_ahead). The message carries that instead,
-- "s:<sleep ms>:<ahead>", and the waiter's client re-arms its timer with
-- it (never later than it was set) without a script (issue 23: the failed
-- attempts of the new head and second after a handoff; issue 33: and the
-- second's after a release, told how long the head's grace has left, by
-- then the lock is free). pttl: the lock's
-- PTTL when the caller read it already (the lock does not change between
-- finish's two wake-ups); returns the PTTL it used, if any.
local function wake_front(owner, second, grace, other, pttl)
    if RES_NOTES and not other and q_noted(owner) then
        pttl = pttl or res_blocked(owner)
        if pttl then
            note(owner, sleep_held(pttl, grace, second))
            return pttl
        end
        -- The lock is free: the head must act, but the waiter behind it
        -- would only be told to sleep until the head's grace ends (reply;
        -- finish keeps no grace but the head's), and the note says that.
        if second and RES_FREE_NOTES and grace > 0 then
            local graced, left = grace_read()
            if graced and left > 0 then
                note(owner, left)
                return nil
            end
        end
    end
    wake(owner)
    return pttl
end

-- Direct handoff (issue 23; on the Redisson engine q_grant_note has a note
-- only for a head of this library's clients, issue 33). A release that leaves the lock
-- free grants it to the live head (after prune) itself: what the head's own
-- take would do (leave the queue, every remaining deadline lower by its
-- slot; the hash owner -> 1; the fencing token INCRed; its acquisition latch
-- written), with two differences. The lease is min(lease, 2 * grace): a
-- head that never claims the grant (dead) holds the lock for at most the
-- two graces the rules give a dead head of a free lock, and then the lock
-- expires and its successor, woken now as the new head, takes it. The latch
-- holds 'granted:<token>': a copy of the head's request (its fallback when
-- the grant message came too late, or a retry) claims the grant once (sets
-- the full lease) and replies the token, latch_check. The grant is published
-- on the head's channel: "g:<token>:<granted ms>:<request id>". Not granted
-- (the head then takes the lock itself, as before): the caller's grace is
-- off, the head is the caller, joined without a latch (or with one outside
-- latch_prefix), or its latch exists already (the request was given up:
-- 'void'), or the token key cannot be INCRed, or its INCR would pass 2^53
-- (token_incr; the head's own take is then refused, token_check). Returns
-- whether it granted.
local function handoff(caller, head, grace, token_key, latch_prefix)
    if not head or head == caller or grace <= 0 or not res_free(head) then
        return false
    end
    local lease, slot, latch_ms, latch = q_grant_note(head)
    if not lease or string.sub(latch, 1, #latch_prefix + 1) ~= latch_prefix .. ':'
            or redis.call('exists', latch) == 1 then
        return false
    end
    local token = token_incr(token_key, true)
    if not token then
        return false
    end
    local ttl = math.min(lease, 2 * grace)
    q_take(head, slot)
    res_take(head, ttl)
    -- The latch outlives the grant's TTL: a copy of the request that finds
    -- the lock still granted must see the latch, or it would re-enter.
    redis.call('set', latch, 'granted:' .. int_str(token), 'px', math.max(latch_ms, ttl))
    redis.call(PUBCMD, CHANNEL .. ':' .. head,
        'g:' .. int_str(token) .. ':' .. int_str(ttl) .. ':' .. string.sub(latch, #latch_prefix + 2))
    return true
end

-- The end of every script that got past its checks: keep the grace key
-- valid, start the head's grace if the lock is free (grace > 0), or its
-- second grace when the first ran out, and wake
-- who must act: the head to take the lock, the waiter behind it to prune
-- the head if it does not (wake_front: on the scalable engine's lock, a
-- waiter woken while the lock is held gets its reply instead). caller:
-- the owner that gets a sleep bound as its reply (fair_try_lock_wait), not
-- woken; nil for the other scripts,
-- whose caller may have a wait in progress elsewhere (one owner, several
-- goroutines). head0, second0: the front of the queue when the script
-- started; freed: the lock became free or its lease was cut short in this
-- script.
local function finish(caller, head0, second0, freed, grace)
    local head, second, other = front()
    local started = false
    if head and res_free(head) then
        local graced, left, again = grace_read()
        if graced and graced ~= head then
            grace_clear()
            graced = nil
        end
        if grace > 0 and (not graced or (not again and left <= 0)) then
            -- no grace yet: the first; a first that ran out: the second
            grace_start(head, grace, graced ~= nil)
            started = true
        end
    else
        grace_clear() -- no grace unless the lock is free with a head
    end
    local pttl -- the lock's, read once for both notes (wake_front)
    if head and head ~= caller and (freed or started or head ~= head0) then
        pttl = wake_front(head, false, grace, other)
    end
    if second and second ~= caller and (freed or started or second ~= second0) then
        wake_front(second, true, grace, other, pttl)
    end
    return head, second
end

-- The reply to a queued caller that did not get the lock (head, second: the
-- front of the queue, as finish returns it): how long it may sleep before
-- trying again (a wake-up may come sooner). It is bounded by the next event
-- that can change its place or free the lock:
--   - lock held (for the semaphore: the front waiter cannot be granted):
--     res_blocked, the lock's PTTL (-1: no expiry; the client re-checks
--     once a watchdog lease); the waiter right behind the head at most the grace,
--     so that it notices a dead head soon after a release even if a
--     wake-up is lost;
--   - lock free (so the head is someone else): until the head's deadline or
--     the end of its grace, whichever comes first; at least 1 (Redisson
--     replies 0 and its waiters poll in a loop: hazard H2).
local function reply(owner, now, grace, head, second)
    local pttl = res_blocked(head or owner)
    if pttl then
        return sleep_held(pttl, grace, second == owner)
    end
    if not head or head == owner then
        return 1
    end
    local wait = (q_head_deadline(head) or now) - now
    local graced, left = grace_read()
    if grace > 0 then
        -- the deadline does not prune (see prune): only the grace's end can
        wait = grace
        if graced == head then
            wait = left
        end
    elseif graced == head and left < wait then
        wait = left
    end
    return math.max(1, wait)
end
