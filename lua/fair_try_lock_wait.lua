-- fair_try_lock_wait.lua: take a fair lock, or join / stay in its queue
-- (Redisson RFairLock tryLock with a wait, used by every waiting form). Both
-- engines run this body, after their queue operations and fair_common.lua.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue "redisson_lock_queue:{name}"
-- KEYS[3]  timeouts "redisson_lock_timeout:{name}"
-- KEYS[4]  scalable queue "fairlock_squeue:{name}" (not in Redisson)
-- KEYS[5]  fencing token "redisson_lock_token:{name}" (not in Redisson's
--          fair lock: its fenced lock's token key, see fair_token)
-- KEYS[6]  acquisition latch (not in Redisson; see latch_common.lua; on
--          the scalable engine a join keeps it, the lease, the slot and
--          ARGV[5] in the queue for a direct handoff, fair_common.lua)
-- KEYS[7]  channel prefix "redisson_lock__channel:{name}" (not in Redisson)
-- KEYS[8]  head grace "fairlock_grace:{name}" (not in Redisson)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner id
-- ARGV[3]  the caller's wait slot in milliseconds
-- ARGV[4]  now: client clock, Unix milliseconds
-- ARGV[5]  latch lifetime in milliseconds (0: no latch)
-- ARGV[6]  head grace in milliseconds (not in Redisson; <= 0: off)
-- ARGV[7]  publish command: "publish" or "spublish" (not in Redisson)
-- ARGV[8]  wake-up message, "0" (not in Redisson)
-- ARGV[9]  "1": reply the caller's queue position too (not in Redisson;
--          optional, absent or anything else: no position)
--
-- Reply: {-1, token} when ARGV[2] now holds the lock (Redisson: nil), with
-- the holder's fencing token (fair_token; a later copy of the request gets
-- the same token, latch_common.lua). Otherwise the caller is queued (it joins at the tail if it
-- was not) and the reply is how long it may sleep before trying again (see
-- reply in fair_common.lua; Redisson replies the tail's time left to a new
-- waiter and the PTTL, or 0 on a free lock, to a queued one). An error
-- reply when the other fair engine keeps this lock's queue.
-- With ARGV[9] "1", a caller left queued gets {sleep, ahead, joined}
-- instead: sleep as above, ahead the waiters ahead of it (q_ahead: exact on
-- the Redisson engine, one LPOS; on the scalable engine from the join
-- sequences, O(1), an upper bound when waiters ahead gave up; -1 unknown),
-- joined 1 when this call put it at the tail, else 0.
local owner, wait = ARGV[2], tonumber(ARGV[3])
local now, grace = tonumber(ARGV[4]), tonumber(ARGV[6])

fair_init(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[7], KEYS[8], ARGV[7], ARGV[8], false)
local refused, no_grace = q_refuse(KEYS[1], KEYS[8])
if refused then
    return refused
end
local replay = latch_check(KEYS[6], ARGV[5], KEYS[1], owner, ARGV[1])
if replay then
    return replay
end
local bad_token = token_check(KEYS[5], KEYS[1], owner)
if bad_token then
    return bad_token
end
local head, head0, second0 = begin(no_grace)
head = prune(owner, now, head, grace)
local held, cut, fresh = take_or_reenter(owner, ARGV[1], wait, head)
if held then
    local token = fair_token(KEYS[5], fresh)
    latch_grant(KEYS[6], ARGV[5], token)
    finish(owner, head0, second0, cut, grace)
    return {-1, token}
end
local joined = 0
if not q_queued(owner) then
    join(owner, wait, now, grant_note(ARGV[1], wait, ARGV[5], KEYS[6]))
    joined = 1
end
local sleep = reply(owner, now, grace, finish(owner, head0, second0, false, grace))
if ARGV[9] == '1' then
    return {sleep, q_ahead(owner), joined}
end
return sleep
