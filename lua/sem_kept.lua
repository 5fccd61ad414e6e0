-- sem_kept.lua: how long Redis still keeps the permits of one Go
-- acquisition (not in Redisson; read-only). Asked by the holder when the
-- explicit lease it sent runs out: a permit's lease may have been moved
-- since (updateLeaseTime, by a Go or a Java client), and the hold follows
-- what Redis keeps.
--
-- KEYS[1]  timeouts
-- ARGV[1]  the non-expiring score, 922337203685477
-- ARGV[2 ..]  the acquisition's permit ids (raw bytes)
--
-- Reply: 0 when one of the permits is not held (absent, or its expiry at or
-- before now on the server's clock); otherwise the ms until the first of
-- them ends: its expiry, or the timeouts set's TTL when that comes first;
-- -1 when none of them expires (every one has the non-expiring score and
-- the set has no TTL).
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kept = -1
for i = 2, #ARGV do
    local e = redis.call('zscore', KEYS[1], ARGV[i])
    if e == false or tonumber(e) <= now then
        return 0
    end
    if tonumber(e) ~= tonumber(ARGV[1]) and (kept < 0 or tonumber(e) - now < kept) then
        kept = tonumber(e) - now
    end
end
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 and (kept < 0 or ttl < kept) then
    kept = ttl
end
return kept
