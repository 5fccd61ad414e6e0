-- sem_update_lease.lua: give a held permit a new lease from now (Redisson
-- updateLeaseTime).
--
-- KEYS[1]  pool
-- KEYS[2]  timeouts
-- KEYS[3]  channel
-- ARGV[1]  permit id (raw bytes)
-- ARGV[2]  lease in ms, -1 for none (Redisson sends the expiry instant)
-- ARGV[3]  now (Unix ms, or -1: the server's clock)
-- ARGV[4]  the non-expiring score
-- ARGV[5]  publish command
--
-- Every expired permit is reclaimed first. Reply: 1 when the permit is held
-- (its expiry is now + lease, or the non-expiring score); 0 otherwise.
local now = sem_now(ARGV[3])
sem_reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[5], now, -1)
if redis.call('zscore', KEYS[2], ARGV[1]) == false then
    return 0
end
redis.call('zadd', KEYS[2], sem_expiry(ARGV[2], now, ARGV[4]), ARGV[1])
return 1
