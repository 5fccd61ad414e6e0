-- sem_release.lua: give back one permit by id (Redisson
-- RPermitExpirableSemaphore tryRelease(id)).
--
-- KEYS[1]  pool
-- KEYS[2]  channel
-- KEYS[3]  timeouts
-- ARGV[1]  permit id (raw bytes)
-- ARGV[2]  1 (the count given back, as Redisson sends it)
-- ARGV[3]  now (Unix ms, or -1: the server's clock)
-- ARGV[4]  publish command
--
-- A permit still in the timeouts set leaves it and goes back to the pool,
-- expired or not, and the pool's new count is published. Reply: 1 when the
-- permit was there and had not expired; 0 otherwise (unknown, released
-- already, reclaimed, or expired: issue #4086).
local expiry = redis.call('zscore', KEYS[3], ARGV[1])
if expiry == false then
    return 0
end
-- Compared before anything is written (not in Redisson, which compares
-- last): a score the comparison cannot read (damage) fails the script
-- with nothing changed, instead of after the permit went back.
local live = tonumber(expiry) > sem_now(ARGV[3])
redis.call('zrem', KEYS[3], ARGV[1])
local value = redis.call('incrby', KEYS[1], ARGV[2])
redis.call(ARGV[4], KEYS[2], value)
if not live then
    return 0
end
return 1
