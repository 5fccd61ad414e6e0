-- rw_renew.lua: the watchdog's renewal of read-write lock holds (Redisson's
-- ReadLockTask batch, used here for the write holds too).
--
-- KEYS     pairs (lock hash, key prefix "{name}"), one pair per renewed hold
-- ARGV[1]  lease in milliseconds
-- then, per pair: a count c and c owner ids (reader "<uuid>:<tid>" or
-- writer "<uuid>:<tid>:write"; this client sends c = 1)
--
-- An owner holds the lock when its field is in the hash and, for a reader,
-- one of its read holds' keys lives (a reader whose keys have all expired
-- is over in Redis: its client has been told the hold was lost, and a late
-- renewal must not bring it back; Redisson's renews the hash all the same).
-- For each owner that holds: every timeout key of its read holds, and the
-- lock, get the larger of their TTL and the lease (Redisson sets both to
-- the lease, which could cut short a longer explicit lease of a re-entry,
-- or of another owner); a hold's key that expired while another of the
-- owner's keys lived is written again (Redisson leaves it out, so a later
-- read unlock, which sets the lock's TTL from the keys, would cut the
-- renewed lease). Reply: per pair, 1 when one of its owners holds the lock
-- (renewed), 0 when none does, -1 when the key holds another type.
local lease = tonumber(ARGV[1])
local out = {}
local a = 2
for i = 1, #KEYS, 2 do
    local hash, prefix = KEYS[i], KEYS[i + 1]
    local c = tonumber(ARGV[a])
    a = a + 1
    local alive, wrong = false, false
    for _ = 1, c do
        local owner = ARGV[a]
        a = a + 1
        local n = redis.pcall('hget', hash, owner)
        if type(n) == 'table' then
            wrong = true
        elseif n and string.sub(owner, -6) == ':write' then
            alive = true
        elseif n then
            -- A reader holds while one of its holds' keys lives: when all
            -- have expired its lease is over in Redis (its client was told
            -- the hold was lost), and this renewal came too late: it must
            -- not bring the hold back (issue 19, case 5).
            local ttls, live = {}, false
            for k = tonumber(n), 1, -1 do
                local t = redis.call('pttl', prefix .. ':' .. owner .. ':rwlock_timeout:' .. k)
                ttls[k] = t
                live = live or t > 0
            end
            if live then
                alive = true
                for k = tonumber(n), 1, -1 do
                    redis.call('set', prefix .. ':' .. owner .. ':rwlock_timeout:' .. k, 1, 'px', math.max(ttls[k], lease))
                end
            end
        end
    end
    if wrong then
        out[#out + 1] = -1
    elseif alive then
        redis.call('pexpire', hash, math.max(redis.call('pttl', hash), lease))
        out[#out + 1] = 1
    else
        out[#out + 1] = 0
    end
end
return out
