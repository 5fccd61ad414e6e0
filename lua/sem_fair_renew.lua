-- sem_fair_renew.lua: the watchdog's batched lease renewal of fair
-- semaphore grants (not in Redisson). A script by itself (only
-- latch_common.lua in front of it, unused).
--
-- KEYS[2i-1]  holders "fairlock_sem:{name_i}"
-- KEYS[2i]    leases "fairlock_sem_lease:{name_i}" (in a cluster, all in
--             one hash slot)
-- ARGV[1]     lease in milliseconds (>= 1), on the server's clock
-- ARGV[i+1]   owner id of pair i
--
-- Reply: an array, one integer per pair: 1 when owner i still holds
-- permits of semaphore i and its lease has not ended: the lease now ends
-- at the server's now + ARGV[1] (never earlier than it did: a renewal
-- never cuts a lease short, since the waiters' sleeps were bounded by the
-- old end); 0 when it does not (never granted, released, or the lease
-- ended: a renewal does not revive it); -1 when a key of pair i holds
-- another type (that pair only; nothing written for it). A renewal that
-- moves a lease end moves the two keys' end with it (the latest lease end
-- plus 10 s, as res_sem.lua's sem_expire).
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
if not lease or lease < 1 or #KEYS ~= 2 * (#ARGV - 1) then
    return redis.error_reply('fairlock: semaphore renew: bad arguments')
end
local out = {}
for i = 1, #ARGV - 1 do
    local holders, leases, owner = KEYS[2 * i - 1], KEYS[2 * i], ARGV[i + 1]
    local held = redis.pcall('hexists', holders, owner)
    local score = redis.pcall('zscore', leases, owner)
    if type(held) == 'table' or (type(score) == 'table' and score.err) then
        out[i] = -1
    elseif held == 1 and score and tonumber(score) > now then
        if now + lease > tonumber(score) then
            redis.call('zadd', leases, now + lease, owner)
            -- the two keys live until the latest lease end plus 10 s
            -- (res_sem.lua's sem_expire, SEM_KEEP)
            local last = redis.call('zrange', leases, -1, -1, 'withscores')
            local ms = tonumber(last[2]) + 10000 - now
            if ms > 0 and ms < math.huge then
                redis.call('pexpire', holders, string.format('%d', ms))
                redis.call('pexpire', leases, string.format('%d', ms))
            end
        end
        out[i] = 1
    else
        out[i] = 0
    end
end
return out
