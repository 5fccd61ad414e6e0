-- sem_lease_time.lua: a held permit's remaining lease (Redisson
-- getLeaseTime).
--
-- KEYS[1]  pool
-- KEYS[2]  timeouts
-- KEYS[3]  channel
-- ARGV[1]  permit id (raw bytes)
-- ARGV[2]  the non-expiring score
-- ARGV[3]  now (Unix ms, or -1: the server's clock)
-- ARGV[4]  publish command
--
-- Every expired permit is reclaimed first. Reply: -1 for a permit with no
-- lease, its remaining ms (at least 1) for one with a lease, 0 when it is
-- not held.
local now = sem_now(ARGV[3])
sem_reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[4], now, -1)
local expiry = redis.call('zscore', KEYS[2], ARGV[1])
if expiry == false then
    return 0
end
if tonumber(expiry) == tonumber(ARGV[2]) then
    return -1
end
return tonumber(expiry) - now
