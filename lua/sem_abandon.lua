-- sem_abandon.lua: the caller gives up an acquisition request of a
-- permit-expirable semaphore (not in Redisson; see sem_acquire.lua's latch).
-- Sent after an attempt whose outcome the caller does not know (its context
-- ended before the reply, or the call failed).
--
-- KEYS[1]  pool
-- KEYS[2]  timeouts
-- KEYS[3]  channel
-- KEYS[4]  the request's acquisition latch
-- ARGV[1]  latch lifetime in ms
-- ARGV[2]  publish command
-- ARGV[3 ..]  the request's permit ids (raw bytes)
--
-- The latch becomes 'void', so a copy of the request that reaches Redis
-- later does nothing; every id of the request still in the timeouts set
-- (a copy took them, expired or not) goes back to the pool, whose new count
-- is published when positive. Reply: how many permits came back. A repeat
-- changes nothing and replies 0. The latch lives no longer than the pool
-- (sem_latch_ttl).
redis.call('set', KEYS[4], 'void', 'px', sem_latch_ttl(KEYS[1], ARGV[1]))
local removed = 0
for i = 3, #ARGV do
    removed = removed + redis.call('zrem', KEYS[2], ARGV[i])
end
if removed > 0 then
    local value = redis.call('incrby', KEYS[1], removed)
    if value > 0 then
        redis.call(ARGV[2], KEYS[3], value)
    end
end
return removed
