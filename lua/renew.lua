-- renew.lua: the watchdog's batched lease renewal (Redisson's renewal batch).
--
-- KEYS[1..n]  lock hashes (in a cluster, all in one hash slot)
-- ARGV[1]     lease in milliseconds
-- ARGV[i+1]   owner id expected in KEYS[i]
--
-- Reply: an array of n integers: 1 when KEYS[i] is still held by ARGV[i+1] and
-- its lease was reset to ARGV[1], 0 when it is not (gone, or held by another),
-- -1 when KEYS[i] holds another type (not in Redisson: there one such key
-- fails the whole batch; here it fails only itself).
local renewed = {}
for i, key in ipairs(KEYS) do
    local held = redis.pcall('hexists', key, ARGV[i + 1])
    if type(held) == 'table' then
        renewed[i] = -1
    elseif held == 1 then
        redis.call('pexpire', key, ARGV[1])
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
