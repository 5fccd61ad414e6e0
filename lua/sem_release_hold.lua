-- sem_release_hold.lua: give back the permits of one Go acquisition (a
-- semaphore.Permit's Release; not in Redisson, whose tryRelease(ids) is
-- sem_release_many.lua).
--
-- KEYS[1]  pool
-- KEYS[2]  timeouts
-- KEYS[3]  channel
-- KEYS[4]  unlock latch "redisson_unlock_latch:{name}:<request id>"
-- ARGV[1]  now (Unix ms, or -1: the server's clock)
-- ARGV[2]  publish command
-- ARGV[3]  latch lifetime in ms
-- ARGV[4 ..]  the acquisition's permit ids (raw bytes)
--
-- Every id still in the timeouts set leaves it, expired or not, and goes
-- back to the pool, whose new count is published when positive. Reply: 1
-- when every id was held (present, not expired), else 0 (the hold was
-- lost; what was left of it came back all the same). A retried call with
-- the same latch key returns the first call's reply without running again.
-- The latch lives no longer than the pool (sem_latch_ttl).
local latched = redis.call('get', KEYS[4])
if latched == '0' or latched == '1' then
    return tonumber(latched)
end
local now = sem_now(ARGV[1])
-- Every score is read and compared before anything is written: a score
-- the comparison cannot read (damage) fails the script with nothing
-- changed.
local held, removed = 0, 0
for i = 4, #ARGV do
    local e = redis.call('zscore', KEYS[2], ARGV[i])
    if e ~= false and tonumber(e) > now then
        held = held + 1
    end
end
for i = 4, #ARGV do
    removed = removed + redis.call('zrem', KEYS[2], ARGV[i])
end
if removed > 0 then
    local value = redis.call('incrby', KEYS[1], removed)
    if value > 0 then
        redis.call(ARGV[2], KEYS[3], value)
    end
end
local reply = 0
if held == #ARGV - 3 then
    reply = 1
end
redis.call('set', KEYS[4], reply, 'px', sem_latch_ttl(KEYS[1], ARGV[3]))
return reply
