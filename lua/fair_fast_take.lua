-- fair_fast_take.lua: the fast path of a fair acquisition (issue 23), in
-- front of fair_try_lock.lua and fair_try_lock_wait.lua (both engines). It
-- is not a script by itself: package wire puts it after latch_common.lua and
-- fair_token.lua and before the engine's queue operations, the resource and
-- fair_common.lua, so that a take of a free lock with nothing queued returns
-- before the rest of the script's functions are even defined (defining them
-- costs about as much Redis time as the take's commands).
--
-- KEYS and ARGV are those of both scripts (only ARGV[3] and ARGV[4], now and
-- the wait slot, are swapped between them, and the fast path reads
-- neither): KEYS[1] lock, KEYS[2] queue, KEYS[3] timeouts, KEYS[4] scalable
-- queue, KEYS[5] token, KEYS[6] acquisition latch, KEYS[8] grace; ARGV[1]
-- lease, ARGV[2] owner, ARGV[5] latch lifetime.
--
-- When the lock is free and none of the queue keys of either engine
-- (queue, timeouts, the scalable queue) and the grace key exists, the full
-- path's refusal,
-- prune and finish have nothing to find, its take has nothing to remove
-- from a queue (the Redisson engine's ZREM, LPOP and ZRANGE act on absent
-- keys) and its finish nothing to wake or delete (the front is empty, the
-- DEL of the grace key deletes nothing): the take below leaves the same
-- state, messages (none) and reply as the full path (res_take, fair_token,
-- latch_grant, in the full path's order), for one EXISTS instead of the
-- queue bookkeeping's 4 (scalable engine) or 7 (Redisson engine) commands.
-- Otherwise the script goes on with the full path, which starts from the
-- lock's state read here (FAST_FREE, see fair_token.lua): an attempt on a
-- held lock (a poll, a join, a re-entry) costs nothing more, and one on a
-- free lock with a queue (the head's take, a poll) one PTTL.
-- TestFastPathsMatchFullPaths (propertytests) compares the two paths.
-- PTTL, not EXISTS (-2: no lock): the full path's joins and replies need
-- the lock's PTTL, which it then has without a command (issue 33).
FAST_PTTL = redis.call('pttl', KEYS[1])
FAST_FREE = FAST_PTTL == -2
if FAST_FREE and redis.call('exists', KEYS[2], KEYS[3], KEYS[4], KEYS[8]) == 0 then
    local replay = latch_check(KEYS[6], ARGV[5], KEYS[1], ARGV[2])
    if replay then
        return replay
    end
    local bad_token = token_check(KEYS[5])
    if bad_token then
        return bad_token
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    local token = fair_token(KEYS[5], true)
    latch_grant(KEYS[6], ARGV[5], token)
    return {-1, token}
end
