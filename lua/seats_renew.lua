-- seats_renew.lua: the watchdog's batched lease renewal of multi-seat holds
-- (not in Redisson). A script by itself (latch_common.lua in front of it,
-- unused).
--
-- KEYS[6i-5]  holds "fairlock_seats:{T_i}"
-- KEYS[6i-4]  leases "fairlock_seats_lease:{T_i}" (in a cluster, all in one
--             hash slot)
-- KEYS[6i-3..6i]  seat, req, queue, grace of venue i: a renewal that moves
--             a lease end moves the venue's keys' end with it (to the new
--             lease end plus 60 s, seats_common.lua's seats_expire, never
--             shorter than it was)
-- ARGV[1]     lease in milliseconds (>= 1), on the server's clock
-- ARGV[i+1]   owner id of pair i
--
-- Reply: one integer per pair: 1 when owner i still holds its seats and its
-- lease has not ended: the lease now ends at the server's now + ARGV[1]
-- (never earlier than it did: the waiters' sleeps were bounded by the old
-- end); 0 when it does not (a renewal never revives a hold); -1 when a key
-- of pair i holds another type (nothing written for it).
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
if not lease or lease < 1 or #KEYS ~= 6 * (#ARGV - 1) then
    return redis.error_reply('fairlock: seats renew: bad arguments')
end
local out = {}
for i = 1, #ARGV - 1 do
    local holds, leases, owner = KEYS[6 * i - 5], KEYS[6 * i - 4], ARGV[i + 1]
    local held = redis.pcall('hexists', holds, owner)
    local score = redis.pcall('zscore', leases, owner)
    if type(held) == 'table' or (type(score) == 'table' and score.err) then
        out[i] = -1
    elseif held == 1 and score and tonumber(score) > now then
        if now + lease > tonumber(score) then
            redis.call('zadd', leases, now + lease, owner)
            local ms = lease + 60000
            for k = 6 * i - 5, 6 * i do
                local p = redis.call('pttl', KEYS[k])
                if p ~= -2 and p < ms then
                    redis.call('pexpire', KEYS[k], ms)
                end
            end
        end
        out[i] = 1
    else
        out[i] = 0
    end
end
return out
