-- sem_renew.lua: the watchdog's renewal of Go acquisitions of
-- permit-expirable semaphores (not in Redisson, whose permits without a
-- lease never expire).
--
-- KEYS[i]  the timeouts set of the i-th hold's semaphore (all in one slot)
-- ARGV[1]  lease in ms
-- ARGV[1+i]  the i-th hold's owner: its permit ids in hex, joined with ','
--
-- For each hold: every one of its permits still held (in the set, expiry
-- after now on the server's clock) -> each expires at now + lease, status 1;
-- otherwise status 0 and nothing is written (permits of it that are left
-- come back with their own expiry); a key of another type -> status -1.
-- Status 0 too when the timeouts set has a TTL shorter than the lease (it
-- inherited the pool's, Redisson's expire()): Redis keeps the permits no
-- longer than that, and a renewal must not promise the holder more; the
-- holder learns its loss now rather than after its keys are gone.
-- Reply: the statuses, in KEYS order.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local out = {}
for i, key in ipairs(KEYS) do
    if type(redis.pcall('zcard', key)) == 'table' then
        out[i] = -1
    else
        local ids = sem_owner_ids(ARGV[1 + i])
        local ttl = redis.call('pttl', key)
        if sem_all_held(key, ids, now) and (ttl < 0 or ttl >= lease) then
            for _, id in ipairs(ids) do
                redis.call('zadd', key, now + lease, id)
            end
            out[i] = 1
        else
            out[i] = 0
        end
    end
end
return out
