-- sem_fair_acquire.lua: take n permits of a fair semaphore, or join / stay
-- in its queue (not in Redisson). Run after latch_common.lua,
-- queue_scalable.lua, res_sem.lua and fair_common.lua.
--
-- KEYS[1]  holders "fairlock_sem:{name}"
-- KEYS[2]  leases "fairlock_sem_lease:{name}"
-- KEYS[3]  pool "fairlock_sem_permits:{name}"
-- KEYS[4]  queue "fairlock_sem_queue:{name}" (queue_scalable.lua's hash)
-- KEYS[5]  asks "fairlock_sem_wants:{name}"
-- KEYS[6]  head grace "fairlock_sem_grace:{name}"
-- KEYS[7]  fencing token counter "fairlock_sem_token:{name}"
-- KEYS[8]  channel prefix "fairlock_sem__channel:{name}"; a waiter listens
--          on "<prefix>:<owner>"
-- KEYS[9]  acquisition latch "fairlock_sem_acquire_latch:{name}:<request-id>"
-- ARGV[1]  lease in milliseconds (>= 1), on the server's clock
-- ARGV[2]  owner id
-- ARGV[3]  permits asked, n >= 1
-- ARGV[4]  the caller's wait slot in milliseconds (>= 0)
-- ARGV[5]  latch lifetime in milliseconds (0: no latch)
-- ARGV[6]  head grace in milliseconds (<= 0: off)
-- ARGV[7]  publish command: "publish" or "spublish"
-- ARGV[8]  1: join or stay in the queue when not granted; 0: one try that
--          never queues (granted only when nobody else is queued ahead, or
--          the caller is the head, and n permits are free)
-- ARGV[9]  "1": reply the caller's queue position too (optional)
--
-- Replies:
--   {1, token}   granted: the owner holds n permits until now + lease;
--                token is the semaphore's fencing token, INCRed by every
--                grant. A later copy of the same request (same latch key)
--                while the grant lasts replies the same {1, token}; one
--                that finds no latch (expired) while the owner holds n
--                permits replies {1, a new token} and latches it (an owner
--                id is one acquisition's: the grant is this request's).
--                A latch 'granted:<token>' (a release granted the permits
--                to this request directly, sem_fair_release.lua) is
--                claimed by the first copy: the lease becomes now + lease
--                (never earlier), the latch 'held:<token>'; {1, token}.
--                A queued caller joins with a handoff note when it sends a
--                latch (queue_scalable.lua's s:<owner>).
--   {0, sleep}   not granted (queued when ARGV[8] is 1): how long the
--                caller may sleep before trying again, in ms (a wake-up on
--                its channel may come sooner; -1: no lease will end, wait
--                for a wake-up or a watchdog period); see reply in
--                fair_common.lua.
--   {0, sleep, ahead, joined}  the same when ARGV[8] and ARGV[9] are "1":
--                ahead the waiters (requests) ahead of the caller, from the
--                join sequences (q_ahead in queue_scalable.lua: O(1), an
--                upper bound when waiters ahead gave up; -1 unknown),
--                joined 1 when this call put the caller at the tail.
--   errors (nothing written):
--     "fairlock: semaphore permits not set"
--     "fairlock: semaphore asked for <n> permits, the pool has <p>"
--     "fairlock: semaphore owner already holds permits" (another count)
--     "fairlock: acquisition request abandoned" (latch_common.lua)
--     "fairlock: acquisition request already granted and its hold is over"
--     "fairlock: semaphore key ... holds the wrong type: ..." (the
--     holders, leases, pool, queue or wants key; res_sem.lua's sem_init
--     and sem_guard read each before anything is written), "fairlock:
--     fencing token key ...: WRONGTYPE ..." or a bad token value, Redis's
--     WRONGTYPE for a latch of another type; "fairlock: semaphore: bad
--     arguments"
local lease, owner, n, wait = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local grace, queue = tonumber(ARGV[6]), ARGV[8] == '1'
if not lease or lease < 1 or not n or n < 1 or n ~= math.floor(n) or not wait or wait < 0 or not grace or not tonumber(ARGV[5]) then
    return redis.error_reply('fairlock: semaphore: bad arguments')
end
local bad = sem_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], false)
if bad then
    return bad
end
bad = token_check(KEYS[7])
if bad then
    return bad
end
if tonumber(ARGV[5]) > 0 then
    local state = redis.call('get', KEYS[9])
    if state == 'void' or state == 'void:held' then
        return redis.error_reply('fairlock: acquisition request abandoned')
    end
    local token = latch_token(state)
    if token then
        if sem_holds(owner) then
            if string.sub(state, 1, 8) == 'granted:' then
                -- A release granted the permits to this request directly
                -- (sem_fair_release.lua's handoff, for at most two graces):
                -- the first copy that comes claims the grant, its lease
                -- becoming this copy's (never shorter), the latch 'held'.
                local ends = NOW + lease
                if ends > LEASE[owner] then
                    redis.call('zadd', KEYS[2], ends, owner)
                    LEASE[owner] = ends
                end
                redis.call('set', KEYS[9], 'held:' .. int_str(token), 'px', ARGV[5])
                sem_expire_holders()
            end
            return {1, token}
        end
        return redis.error_reply('fairlock: acquisition request already granted and its hold is over')
    end
end
if sem_holds(owner) then
    -- An owner id is one acquisition's (package semaphore makes a fresh
    -- one for each), so a live grant of the same n is this request's own,
    -- met by a copy that found no latch (it expired: Redis was away longer
    -- than it lives). Replied as the grant with a new token (the first is
    -- not known any more; a new one is larger than every token before it)
    -- and latched again, as sem_acquire.lua does: refusing it left the
    -- permits held by nobody until their lease ended (issue 30 item 2).
    if tonumber(HOLD[owner]) ~= n then
        return redis.error_reply('fairlock: semaphore owner already holds permits')
    end
    local again = fair_token(KEYS[7], true)
    latch_grant(KEYS[9], ARGV[5], again)
    return {1, again}
end
if POOL == nil then
    return redis.error_reply('fairlock: semaphore permits not set')
end
if n > POOL then
    return redis.error_reply('fairlock: semaphore asked for ' .. n .. ' permits, the pool has ' .. POOL)
end
local queued
queued, bad = sem_guard(owner)
if bad then
    return bad
end

-- Nothing was written above; every key written below was read with a
-- command of its type above (sem_guard).
fair_init(KEYS[1], nil, nil, KEYS[4], KEYS[8], KEYS[6], ARGV[7], '0', false)
local head, head0, second0 = begin()
if not head then
    queued = false -- an empty queue (or one begin reset)
end
sem_reclaim()
sem_want_set(owner, n)
if queued then
    sem_want_store(owner, n)
end
head = prune(owner, NOW, head, grace)
local held = take_or_reenter(owner, lease, wait, head)
if held then
    local token = fair_token(KEYS[7], true)
    latch_grant(KEYS[9], ARGV[5], token)
    finish(owner, head0, second0, RECLAIMED, grace)
    sem_tidy(GRACE_MARGIN, grace)
    return {1, token}
end
local caller, joined = nil, 0
if queue then
    caller = owner
    if not queued then
        -- with a latch, the handoff note: what a release needs to grant
        -- the permits to this request directly (queue_scalable.lua)
        join(owner, wait, NOW, grant_note(lease, wait, ARGV[5], KEYS[9]))
        sem_want_store(owner, n)
        joined = 1
    end
end
local sleep = reply(owner, NOW, grace, finish(caller, head0, second0, RECLAIMED, grace))
sem_tidy(GRACE_MARGIN, grace)
if queue and ARGV[9] == '1' then
    return {0, sleep, q_ahead(owner), joined}
end
return {0, sleep}
